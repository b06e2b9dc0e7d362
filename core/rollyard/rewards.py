"""Apply a weighted set of reward plugins to a group of samples."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from rollyard.evaluators import Evaluator, evaluator_of
from rollyard.interfaces import Reward
from rollyard.types import Sample, Task


class RewardSet:
    """Weighted rewards. A float score is recorded as component ``name``; a dict score as
    ``name/key`` per key, contributing the sum of its values. The total is the weighted sum.

    Rewards that name an :class:`~rollyard.evaluators.Evaluator` share one instance of it per
    evaluator class, built here from the first such reward's context (so construction raises
    when an evaluator cannot work here); each group is evaluated once, before the rewards run.
    One set serves one rollout worker of one run: call :meth:`close` when done.
    """

    def __init__(self, rewards: Mapping[str, Reward], weights: Mapping[str, float]) -> None:
        self.rewards = dict(rewards)
        self.weights = {name: float(weights.get(name, 1.0)) for name in self.rewards}
        #: The evaluator class each reward reads (rewards that score samples themselves are
        #: absent).
        self.reads: dict[str, type[Evaluator[Any]]] = {}
        #: One instance per distinct evaluator class, in the order rewards first name them.
        self.evaluators: dict[type[Evaluator[Any]], Evaluator[Any]] = {}
        for name, reward in self.rewards.items():
            evaluator = evaluator_of(reward)
            if evaluator is None:
                continue
            self.reads[name] = evaluator
            if evaluator not in self.evaluators:
                self.evaluators[evaluator] = evaluator(reward.context)

    def __bool__(self) -> bool:
        return bool(self.rewards)

    async def score_group(self, samples: list[Sample], task: Task) -> None:
        """Set ``reward`` and ``rewards`` on each usable sample; a raising evaluator or reward
        fails them."""
        usable = [s for s in samples if s.usable]
        if not usable or not self.rewards:
            return
        results: dict[type[Evaluator[Any]], Sequence[Any]] = {}
        for cls, evaluator in self.evaluators.items():
            try:
                results[cls] = await evaluator.evaluate(usable, task)
                if len(results[cls]) != len(usable):
                    raise ValueError(f"returned {len(results[cls])} results for "
                                     f"{len(usable)} samples")
            except Exception as exc:  # an evaluator bug fails the samples, not the run
                readers = ", ".join(repr(n) for n, c in self.reads.items() if c is cls)
                _fail(usable, f"evaluator {cls.__qualname__} (of reward {readers}) raised "
                              f"{exc!r}")
                return
        totals = [0.0] * len(usable)
        for name, reward in self.rewards.items():
            try:
                if name in self.reads:
                    scores = await reward.score_evaluated(  # type: ignore[attr-defined]
                        usable, task, results[self.reads[name]])
                else:
                    scores = await reward.score_group(usable, task)
                if len(scores) != len(usable):
                    raise ValueError(f"returned {len(scores)} scores for {len(usable)} samples")
                components = [_components(name, score) for score in scores]
            except Exception as exc:  # a reward bug fails the samples, not the run
                _fail(usable, f"reward {name!r} raised {exc!r}")
                return
            for i, (sample, parts) in enumerate(zip(usable, components)):
                sample.rewards.update(parts)
                totals[i] += self.weights[name] * sum(parts.values())
        for sample, total in zip(usable, totals):
            sample.reward = total if math.isfinite(total) else 0.0

    def metrics(self) -> dict[str, float]:
        """The evaluators' metrics since the last call (each resets its own)."""
        merged: dict[str, float] = {}
        for evaluator in self.evaluators.values():
            merged.update(evaluator.metrics())
        return merged

    async def close(self) -> None:
        """Close every evaluator, even when one of them raises (the first error is raised
        after the rest are closed). Safe to call twice."""
        error: BaseException | None = None
        for evaluator in self.evaluators.values():
            try:
                await evaluator.close()
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error


def _fail(samples: list[Sample], reason: str) -> None:
    for sample in samples:
        sample.fail(reason)


def _components(name: str, score: float | dict[str, float]) -> dict[str, float]:
    """A score as named finite floats; anything else is a bug of the reward that returned it."""
    parts = {f"{name}/{key}": value for key, value in score.items()} if isinstance(score, dict) \
        else {name: score}
    for value in parts.values():
        if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                or not math.isfinite(value):
            raise ValueError(f"returned {value!r}; scores must be finite numbers")
    return {key: float(value) for key, value in parts.items()}
