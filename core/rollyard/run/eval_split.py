"""Evaluation on the rollout's ``eval`` split (``--eval-interval``, ``rollyard eval``).

An evaluation runs ``--eval-samples`` episodes of each of the first ``--eval-tasks`` eval tasks
(all of them by default) at ``--eval-temperature`` (0: greedy), through a rollout instance of
its own with its own rng, and with sampling seeds derived from the run's seed, the step and
the task's index in the split. It never draws from the training task order or from the
training rollout's rng, so a seeded run trains on the same samples with or without it.

pass@k (Chen et al., 2021, the unbiased estimator): a task with ``n`` samples of which ``c``
solve it (:meth:`rollyard.Rollout.solved`) has pass@k ``1 - C(n-c, k) / C(n, k)``, the
chance that ``k`` samples drawn from the ``n`` without replacement include a solving one;
``eval/pass@k`` is its mean over the tasks.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from statistics import fmean

from rollyard.config import RunConfig
from rollyard.errors import ConfigError
from rollyard.seeding import derive_seed
from rollyard.types import Sample

#: What one evaluation collects: the samples, whether each solved its task, and the
#: rollout's (and its rewards') own metrics.
EvalResult = tuple[list[Sample], list[bool], dict[str, float]]
#: ``evaluate(task indices, seeds)``: run the groups of those eval tasks.
EvalCall = Callable[[list[int], list[int]], Awaitable[EvalResult]]


@dataclass(frozen=True)
class EvalPlan:
    """Which eval tasks an evaluation runs, and how many samples of each."""

    tasks: list[int]
    samples: int

    @classmethod
    def of(cls, config: RunConfig, available: int, where: str) -> EvalPlan:
        """The plan of ``config``'s eval options over a split of ``available`` tasks; a
        ConfigError starting with ``where`` (the option or command that asked for it) when
        the rollout has no eval task."""
        if available <= 0:
            raise ConfigError(f"{where}: rollout {config.rollout_plugin!r} has no eval tasks "
                              "(its tasks('eval') is empty); choose a rollout with an eval "
                              "split")
        count = min(config.eval_tasks, available) if config.eval_tasks else available
        return cls(list(range(count)), config.eval_samples)

    def seeds(self, run_seed: int, step: int) -> list[int]:
        """One sampling seed per eval task, from the run's seed, the step and the task."""
        return [derive_seed(run_seed, "eval", step, index) for index in self.tasks]


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of a task with ``n`` samples of which ``c`` solve it."""
    if not 0 < k <= n or not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 < k <= n and 0 <= c <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def eval_metrics(samples: list[Sample], solved: list[bool], k: int,
                 env_metrics: dict[str, float]) -> dict[str, float]:
    """The ``eval/*`` metrics of one evaluation. ``eval/reward`` is the mean reward of every
    sample, a failed or aborted one counting 0; pass@1 and pass@k are averaged over tasks."""
    by_task: dict[str, list[bool]] = {}
    for sample, ok in zip(samples, solved):
        by_task.setdefault(sample.task_id, []).append(ok and sample.usable)
    metrics = {
        "eval/reward": fmean(s.reward if s.usable else 0.0 for s in samples) if samples else 0.0,
        "eval/tasks": float(len(by_task)),
        "eval/failed_rate": (sum(not s.usable for s in samples) / len(samples)
                             if samples else 0.0),
        "eval/response_len_mean": (fmean(s.response_len for s in samples if s.usable)
                                   if any(s.usable for s in samples) else 0.0),
    }
    for j in sorted({1, k}):
        # a task that came back with fewer samples (a failed group) counts over those it has
        metrics[f"eval/pass@{j}"] = (fmean(pass_at_k(len(oks), sum(oks), min(j, len(oks)))
                                           for oks in by_task.values()) if by_task else 0.0)
    metrics.update({f"eval/{name}": value for name, value in env_metrics.items()})
    return metrics


async def run_evaluation(plan: EvalPlan, evaluate: EvalCall, run_seed: int,
                         step: int) -> dict[str, float]:
    """One evaluation through ``evaluate`` (a rollout pool's or a worker's); its metrics."""
    samples, solved, env = await evaluate(plan.tasks, plan.seeds(run_seed, step))
    return eval_metrics(samples, solved, plan.samples, env)
