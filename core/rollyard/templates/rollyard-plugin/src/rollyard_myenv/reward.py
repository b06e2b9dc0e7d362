"""The reward: how much of the sorted word the completion gets right."""

from __future__ import annotations

from rollyard import Reward, Sample, Task


class SortedMatch(Reward):
    """1.0 for the sorted word; otherwise the share of its positions the answer matches."""

    name = "myenv-sorted"

    async def score(self, sample: Sample, task: Task) -> float:
        words = (sample.completion or "").split()
        answer = task.data["answer"]
        given = words[0] if words else ""
        if given == answer:
            return 1.0
        return sum(a == b for a, b in zip(given, answer)) / max(len(answer), len(given))
