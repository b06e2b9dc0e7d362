"""The groups one step drew, and which of them carry a learning signal."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping

from rollyard.model_facts import rewards_differ
from rollyard.types import Sample

#: ``Sample.metadata`` key naming the environment (its label) a sample comes from.
ENV_KEY = "env"


def env_of(sample: Sample) -> str:
    """The label of the environment ``sample`` comes from ("" when it was not marked)."""
    return str(sample.metadata.get(ENV_KEY, ""))


def has_signal(group: list[Sample]) -> bool:
    """Whether the usable samples of a group have different rewards (the zero-variance rule of
    :func:`rollyard.model_facts.rewards_differ`)."""
    return rewards_differ([s.reward for s in group if s.usable])


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
        #: share of the first draw's groups without a signal (before any redraw), and the
        #: same per environment
        self.first_zero_variance_share = self.zero_variance_share()
        self.first_zero_variance_by_env = {
            env: sum(not has_signal(g) for g in groups) / len(groups)
            for env, groups in self.groups_by_env().items()}

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

    def groups_by_env(self) -> dict[str, list[list[Sample]]]:
        """:meth:`groups`, by the label of the environment they come from."""
        by_env: dict[str, list[list[Sample]]] = defaultdict(list)
        for group in self.groups():
            by_env[env_of(group[0])].append(group)
        return dict(by_env)

    def signal_groups(self) -> int:
        return sum(has_signal(group) for group in self.groups())

    def shortfall(self, wanted: Mapping[str, int]) -> dict[str, int]:
        """Groups with a signal each environment still lacks (only those lacking any)."""
        by_env = self.groups_by_env()
        short = {env: count - sum(has_signal(g) for g in by_env.get(env, []))
                 for env, count in wanted.items()}
        return {env: count for env, count in short.items() if count > 0}

    def zero_variance_share(self) -> float:
        groups = self.groups()
        return sum(not has_signal(g) for g in groups) / len(groups) if groups else 0.0

    def training_samples(self, wanted: Mapping[str, int],
                         signal_only: bool = True) -> list[Sample]:
        """Of each environment, the first ``wanted[env]`` groups with a signal
        (``signal_only``), else its first ``wanted[env]`` groups; with no signal group at all
        there, its first ``wanted[env]`` groups (the trainer then skips them when it filters,
        trains when not)."""
        by_env = self.groups_by_env()
        chosen: list[list[Sample]] = []
        for env, count in wanted.items():
            groups = by_env.get(env, [])
            signal = [g for g in groups if has_signal(g)] if signal_only else []
            chosen += signal[:count] if signal else groups[:count]
        return [s for group in chosen for s in group]

    def metrics(self) -> dict[str, float]:
        """The draw's ``rollout/*`` metrics; with several environments also
        ``rollout/zero_variance_share/<env>``."""
        metrics = {"rollout/zero_variance_share": self.first_zero_variance_share,
                   "rollout/resamples": float(self.draws - 1),
                   "rollout/groups_drawn": float(self.groups_drawn),
                   "rollout/signal_groups": float(self.signal_groups()),
                   "rollout/replayed": float(len(self.replayed))}
        if len(self.first_zero_variance_by_env) > 1:
            metrics.update({f"rollout/zero_variance_share/{env}": share
                            for env, share in self.first_zero_variance_by_env.items()})
        return metrics


#: Draws groups, so many of each environment: (samples, worker metrics, replayed samples).
Draw = Callable[[Mapping[str, int]],
                Awaitable[tuple[list[Sample], dict[str, float], list[Sample]]]]


def resample_budget(wanted: int, factor: float) -> int:
    """Most groups one step may draw: ``factor`` × ``wanted``, never fewer than ``wanted``."""
    return max(wanted, int(factor * wanted))


async def draw_groups(draw: Draw, wanted: Mapping[str, int], budget: int,
                      refill: bool) -> GroupDraw:
    """Draw ``wanted[env]`` groups of each environment; with ``refill`` (groups with equal
    rewards are filtered), draw each environment's shortfall again, within ``budget`` groups
    in all, until every environment has its ``wanted`` groups with a signal."""
    groups = GroupDraw(*await draw(dict(wanted)))
    while refill and groups.groups_drawn < budget:
        room, ask = budget - groups.groups_drawn, {}
        for env, count in groups.shortfall(wanted).items():
            ask[env] = min(count, room)
            room -= ask[env]
            if not room:
                break
        if not ask:
            break
        groups.add(*await draw(ask))
    return groups
