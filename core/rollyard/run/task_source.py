"""Which training tasks each step draws: a :class:`TaskSource`.

A source plans how many of a step's groups each environment gets (:meth:`TaskSource.plan`)
and hands out task indices of an environment (:meth:`TaskSource.take`); ``drawn`` counts the
tasks taken so far, from which each group's sampling seed is derived. Its state is saved with
every checkpoint, so a resumed run draws what the uninterrupted one would have.

- :class:`SingleSource`: one environment, every group from its shuffled passes
  (:class:`TaskCycle`).
- :class:`WeightedSource`: several, with exact quotas: each step's groups are split in
  proportion to the weights by largest remainder, and what rounding gave or took is carried
  to the next step, so the counts over any stretch of steps are as close to the weights as
  integers allow (1:3 over 8 groups is 2 and 6 every step; 1:2 over 64 is 21/43, 22/42,
  21/43, … whose long-run share is exactly one third).

A curriculum or a difficulty sampler is another implementation of the same protocol.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Protocol

from rollyard.errors import ConfigError


class TaskSource(Protocol):
    """Plans a step's groups over the environments and hands out their task indices."""

    #: Tasks taken so far (a group's place in the run: its sampling seed derives from it).
    drawn: int

    def plan(self, groups: int) -> dict[str, int]:
        """How many of a step's ``groups`` each environment gets (every label present)."""
        ...

    def take(self, label: str, count: int) -> list[int]:
        """The next ``count`` task indices of the environment ``label``."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The source's state as JSON data (saved with a checkpoint)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state_dict`."""
        ...


class TaskCycle:
    """Endless shuffled passes over a split's task indices. ``drawn`` counts the tasks taken
    so far: a group's place in the run, from which its sampling seed is derived."""

    def __init__(self, count: int, rng: random.Random) -> None:
        if not count:
            raise ConfigError("the rollout plugin has no training tasks")
        self.count, self.rng, self.queue = count, rng, []
        self.drawn = 0

    def take(self, n: int) -> list[int]:
        out = []
        while len(out) < n:
            if not self.queue:
                self.queue = list(range(self.count))
                self.rng.shuffle(self.queue)
            out.append(self.queue.pop())
        self.drawn += n
        return out

    def state_dict(self) -> dict[str, Any]:
        """The cursor as JSON data (saved with a checkpoint)."""
        version, internal, gauss = self.rng.getstate()
        return {"count": self.count, "queue": list(self.queue), "drawn": self.drawn,
                "rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["count"] != self.count:
            raise ConfigError(f"the checkpoint's task cursor is over {state['count']} training "
                              f"tasks, the rollout now has {self.count}")
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.queue, self.drawn = list(state["queue"]), int(state["drawn"])


class SingleSource:
    """One environment's tasks (its state is the :class:`TaskCycle`'s, as before mixing)."""

    def __init__(self, label: str, count: int, rng: random.Random) -> None:
        self.label, self.cycle = label, TaskCycle(count, rng)

    @property
    def drawn(self) -> int:
        return self.cycle.drawn

    def plan(self, groups: int) -> dict[str, int]:
        return {self.label: groups}

    def take(self, label: str, count: int) -> list[int]:
        return self.cycle.take(count)

    def state_dict(self) -> dict[str, Any]:
        return self.cycle.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.cycle.load_state_dict(state)


def split_quotas(groups: int, weights: Mapping[str, Fraction],
                 carried: Mapping[str, Fraction]) -> tuple[dict[str, int], dict[str, Fraction]]:
    """``groups`` split in proportion to ``weights`` plus what earlier steps ``carried``, by
    largest remainder (ties: the first environment); returns the quotas and what to carry on
    (each environment's ideal count so far minus its count so far)."""
    total = sum(weights.values())
    ideal = {label: groups * weight / total + carried.get(label, Fraction(0))
             for label, weight in weights.items()}
    quotas = {label: max(0, int(value)) for label, value in ideal.items()}  # int(): floor >= 0
    order = sorted(weights, key=lambda label: (-(ideal[label] - quotas[label]),
                                               list(weights).index(label)))
    for label in order[:groups - sum(quotas.values())]:
        quotas[label] += 1
    return quotas, {label: ideal[label] - quotas[label] for label in weights}


class WeightedSource:
    """Several environments with exact per-step quotas (:func:`split_quotas`); each has its
    own shuffled passes over its tasks, seeded from the run's seed and its label."""

    def __init__(self, counts: Mapping[str, int], weights: Mapping[str, float], seed: int,
                 groups_per_step: int) -> None:
        self.weights = {label: Fraction(str(weights[label])) for label in counts}
        self.cycles = {label: TaskCycle(count, random.Random(f"{seed}-tasks-{label}"))
                       for label, count in counts.items()}
        self.carried = {label: Fraction(0) for label in counts}
        self.drawn = 0
        total = sum(self.weights.values())
        starved = [label for label, weight in self.weights.items()
                   if groups_per_step * weight < total]
        if starved:
            raise ConfigError(
                f"--groups-per-step {groups_per_step} gives environment {starved[0]!r} less "
                f"than one group per step at these weights ({_ratio(self.weights)}); raise "
                "--groups-per-step or its weight")

    def plan(self, groups: int) -> dict[str, int]:
        quotas, self.carried = split_quotas(groups, self.weights, self.carried)
        return quotas

    def take(self, label: str, count: int) -> list[int]:
        self.drawn += count
        return self.cycles[label].take(count)

    def state_dict(self) -> dict[str, Any]:
        return {"drawn": self.drawn,
                "carried": {label: str(value) for label, value in self.carried.items()},
                "cycles": {label: cycle.state_dict() for label, cycle in self.cycles.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state.get("cycles", {})) != set(self.cycles):
            raise ConfigError(f"the checkpoint's task cursor is over the environments "
                              f"{sorted(state.get('cycles', {}))}, this run has "
                              f"{sorted(self.cycles)}")
        for label, cycle in self.cycles.items():
            cycle.load_state_dict(state["cycles"][label])
        self.carried = {label: Fraction(value) for label, value in state["carried"].items()}
        self.drawn = int(state["drawn"])


def make_source(counts: Mapping[str, int], weights: Mapping[str, float], seed: int,
                groups_per_step: int) -> SingleSource | WeightedSource:
    """The source of a run of these environments (``{label: train tasks}``)."""
    if len(counts) == 1:
        (label, count), = counts.items()
        return SingleSource(label, count, random.Random(seed))
    return WeightedSource(counts, weights, seed, groups_per_step)


def _ratio(weights: Mapping[str, Fraction]) -> str:
    return ", ".join(f"{label} {float(weight):g}" for label, weight in weights.items())
