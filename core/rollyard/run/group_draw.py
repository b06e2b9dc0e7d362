"""The groups one step drew, and which of them carry a learning signal."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable

from rollyard.algorithms import ZERO_VARIANCE_STD, population_std
from rollyard.types import Sample


def has_signal(group: list[Sample]) -> bool:
    """Whether the usable samples of a group have different rewards."""
    rewards = [s.reward for s in group if s.usable]
    return len(rewards) >= 2 and population_std(rewards) >= ZERO_VARIANCE_STD


class GroupDraw:
    """Samples of every group drawn for a step, in the order they were drawn, and the replayed
    samples (``--replay-best``, :mod:`rollyard.run.best_replay`) added to their groups."""

    def __init__(self, samples: list[Sample], worker_metrics: dict[str, float],
                 replayed: list[Sample] | None = None) -> None:
        #: the samples the rollouts drew (what the step's sample metrics describe)
        self.samples: list[Sample] = []
        #: copies of earlier samples, each a member of the group whose ``group_id`` it has
        self.replayed: list[Sample] = []
        self.draws = 0
        self._worker: dict[str, list[float]] = defaultdict(list)
        self.add(samples, worker_metrics, replayed)
        #: share of the first draw's groups without a signal (before any redraw)
        self.first_zero_variance_share = self.zero_variance_share()

    def add(self, samples: list[Sample], worker_metrics: dict[str, float],
            replayed: list[Sample] | None = None) -> None:
        self.samples += samples
        self.replayed += replayed or []
        self.draws += 1
        for key, value in worker_metrics.items():
            self._worker[key].append(value)

    @property
    def groups_drawn(self) -> int:
        return len(self.groups())

    @property
    def worker_metrics(self) -> dict[str, float]:
        """Each metric the rollout workers reported (``env/…`` and the core's own), averaged
        over the draws."""
        return {k: sum(v) / len(v) for k, v in self._worker.items()}

    def groups(self) -> list[list[Sample]]:
        """Each group's drawn samples, then its replayed one (a replayed sample whose group
        has no drawn sample left, dropped as stale, is left out)."""
        by_id: dict[str, list[Sample]] = defaultdict(list)
        for sample in self.samples:
            by_id[sample.group_id].append(sample)
        for sample in self.replayed:
            if sample.group_id in by_id:
                by_id[sample.group_id].append(sample)
        return list(by_id.values())

    def signal_groups(self) -> int:
        return sum(has_signal(group) for group in self.groups())

    def zero_variance_share(self) -> float:
        groups = self.groups()
        return sum(not has_signal(g) for g in groups) / len(groups) if groups else 0.0

    def training_samples(self, wanted: int, signal_only: bool = True) -> list[Sample]:
        """The first ``wanted`` groups with a signal (``signal_only``), else the first
        ``wanted`` groups; with no signal group at all, the first ``wanted`` groups (the
        trainer then skips them when it filters, trains when not)."""
        signal = [g for g in self.groups() if has_signal(g)] if signal_only else []
        chosen = signal[:wanted] if signal else self.groups()[:wanted]
        return [s for group in chosen for s in group]

    def metrics(self) -> dict[str, float]:
        return {"rollout/zero_variance_share": self.first_zero_variance_share,
                "rollout/resamples": float(self.draws - 1),
                "rollout/groups_drawn": float(self.groups_drawn),
                "rollout/signal_groups": float(self.signal_groups()),
                "rollout/replayed": float(len(self.replayed))}


#: Draws groups: (samples, worker metrics, replayed samples).
Draw = Callable[[int], Awaitable[tuple[list[Sample], dict[str, float], list[Sample]]]]


def resample_budget(wanted: int, factor: float) -> int:
    """Most groups one step may draw: ``factor`` × ``wanted``, never fewer than ``wanted``."""
    return max(wanted, int(factor * wanted))


async def draw_groups(draw: Draw, wanted: int, budget: int, refill: bool) -> GroupDraw:
    """Draw ``wanted`` groups; with ``refill`` (groups with equal rewards are filtered), draw
    the shortfall again, within ``budget`` groups in all, until ``wanted`` carry a signal."""
    groups = GroupDraw(*await draw(wanted))
    while refill and groups.signal_groups() < wanted and groups.groups_drawn < budget:
        groups.add(*await draw(min(wanted - groups.signal_groups(),
                                   budget - groups.groups_drawn)))
    return groups
