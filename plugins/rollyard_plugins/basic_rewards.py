"""Text rewards against ``task.data["answer"]``, usable by any environment whose rollout puts
the decoded completion in ``sample.completion``."""

from __future__ import annotations

from collections import Counter

from rollyard import Reward, Sample, Task, hookimpl


def _completion_and_answer(sample: Sample, task: Task) -> tuple[str, str]:
    if "answer" not in task.data:
        raise KeyError(f"task {task.id!r} has no data['answer'] to compare with")
    return (sample.completion or "").strip(), str(task.data["answer"]).strip()


class ExactMatch(Reward):
    """1.0 when the stripped completion equals the stripped answer, else 0.0."""

    name = "exact-match"

    async def score(self, sample: Sample, task: Task) -> float:
        completion, answer = _completion_and_answer(sample, task)
        return float(completion == answer)


class CharF1(Reward):
    """Partial credit for tiny models: half the F1 of the multisets of characters of
    completion and answer, half the share of positions holding the answer's character, counted
    over the longer of the two, so characters written after the answer cost as much as
    characters missing from it."""

    name = "char-f1"

    async def score(self, sample: Sample, task: Task) -> float:
        completion, answer = _completion_and_answer(sample, task)
        if not completion or not answer:
            return 0.0
        overlap = sum((Counter(completion) & Counter(answer)).values())
        if overlap == 0:
            return 0.0
        precision, recall = overlap / len(completion), overlap / len(answer)
        f1 = 2 * precision * recall / (precision + recall)
        in_place = (sum(a == b for a, b in zip(completion, answer))
                    / max(len(completion), len(answer)))
        return 0.5 * f1 + 0.5 * in_place


@hookimpl
def register_rewards(register):
    register(ExactMatch)
    register(CharF1)
