"""Apply a weighted set of reward plugins to a group of samples."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

from rollyard.interfaces import Reward
from rollyard.types import Sample, SampleStatus, Task


class RewardSet:
    """Weighted rewards. A float score is recorded as component ``name``; a dict score as
    ``name/key`` per key, contributing the sum of its values. The total is the weighted sum."""

    def __init__(self, rewards: Mapping[str, Reward], weights: Mapping[str, float]) -> None:
        self.rewards = dict(rewards)
        self.weights = {name: float(weights.get(name, 1.0)) for name in self.rewards}

    def __bool__(self) -> bool:
        return bool(self.rewards)

    async def score_group(self, samples: list[Sample], task: Task) -> None:
        """Set ``reward`` and ``rewards`` on each usable sample; a raising reward fails them."""
        usable = [s for s in samples if s.usable]
        if not usable or not self.rewards:
            return
        totals = [0.0] * len(usable)
        for name, reward in self.rewards.items():
            try:
                scores = await reward.score_group(usable, task)
                if len(scores) != len(usable):
                    raise ValueError(f"returned {len(scores)} scores for {len(usable)} samples")
                components = [_components(name, score) for score in scores]
            except Exception as exc:  # a reward bug fails the samples, not the run
                for sample in usable:
                    sample.status = SampleStatus.FAILED
                    sample.reward = 0.0
                    sample.metadata["failure"] = f"reward {name!r} raised {exc!r}"
                return
            for i, (sample, parts) in enumerate(zip(usable, components)):
                sample.rewards.update(parts)
                totals[i] += self.weights[name] * sum(parts.values())
        for sample, total in zip(usable, totals):
            sample.reward = total if math.isfinite(total) else 0.0


def _components(name: str, score: float | dict[str, float]) -> dict[str, float]:
    """A score as named finite floats; anything else is a bug of the reward that returned it."""
    parts = {f"{name}/{key}": value for key, value in score.items()} if isinstance(score, dict) \
        else {name: score}
    for value in parts.values():
        if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not math.isfinite(value):
            raise ValueError(f"returned {value!r}; scores must be finite numbers")
    return {key: float(value) for key, value in parts.items()}
