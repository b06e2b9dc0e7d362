"""Best-sample replay (``--replay-best``): each training task's highest-reward sample so far,
added to a later group of that task whose samples all scored below it.

A group whose samples agree carries no learning signal, and a policy that has settled on one
answer for every input draws nothing but such groups. With the task's best answer added, the
group again has a signal: up towards the best answer seen, down from the answer the policy
settled on. The replayed copy takes the group's id and weight version, is trained with the
group (the trainer recomputes its logprobs under the current policy, so its ratio starts at
one) and is not a new sample: it is left out of the step's reward metrics and samples.jsonl.
This is self-imitation (Oh et al., 2018, "Self-Imitation Learning") within GRPO's groups.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence

from rollyard.types import Sample


class BestSamples:
    """The highest-reward usable sample of each task seen so far, without its metadata. They
    stay in the driver's memory and go into every checkpoint: one per training task."""

    def __init__(self) -> None:
        self._best: dict[str, Sample] = {}

    def replays(self, samples: Sequence[Sample]) -> list[Sample]:
        """One replayed copy for each group of ``samples`` whose usable samples all scored
        below the best kept for its task; then keep each group's best where it is a new best.
        A group is compared with the bests from before this call, never with itself."""
        groups: dict[str, list[Sample]] = defaultdict(list)
        for sample in samples:
            if sample.usable:
                groups[sample.group_id].append(sample)
        replayed, found = [], {}
        for group_id, group in groups.items():
            top = max(group, key=lambda s: s.reward)
            kept = self._best.get(top.task_id)
            if kept is not None and kept.reward > top.reward:
                replayed.append(dataclasses.replace(
                    kept, group_id=group_id, weight_version=top.weight_version, metadata={},
                    replayed_from_version=kept.weight_version))
            best_so_far = found.get(top.task_id, kept)
            if best_so_far is None or top.reward > best_so_far.reward:
                # what training needs, without the environment's metadata (the decoded text
                # and whatever the rollout kept): one sample per task stays in memory
                found[top.task_id] = dataclasses.replace(top, metadata={}, completion=None)
        self._best.update(found)
        return replayed

    def state_dict(self) -> dict[str, Sample]:
        """The kept samples by task id (a copy; the samples themselves are never changed)."""
        return dict(self._best)

    def load_state_dict(self, state: dict[str, Sample]) -> None:
        self._best = dict(state)


def rescore_replayed(trained: Sequence[Sample],
                     logprobs: Callable[[list[Sample]], list[list[float]]]) -> None:
    """Give the replayed samples of ``trained`` (``replayed_from_version`` set) the logprobs
    ``logprobs`` computes for them: the current policy's, which their ratio is taken against
    (the engine's were an older policy's)."""
    replayed = [sample for sample in trained if sample.replayed_from_version is not None]
    if replayed:
        for sample, current in zip(replayed, logprobs(replayed), strict=True):
            sample.logprobs = list(current)
