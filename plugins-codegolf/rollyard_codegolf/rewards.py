"""Rewards ``codegolf.correct``, ``codegolf.concise`` and ``codegolf.fast``.

Each reads the sample's program record (``sample.metadata["codegolf"]``: program, tests passed,
reason, runtime, length) and computes it when missing, so any rollout that puts the model's
reply in ``metadata["completion"]`` and poses tasks made by ``CodegolfTask.to_task`` can use
them. A score of 0 has its reason in the record's ``reason`` field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rollyard import Reward, RewardContext, Sample, Task

from rollyard_codegolf.settings import CodegolfSettings

if TYPE_CHECKING:
    from rollyard_codegolf.runner import ProgramRunner

Scores = list[float | dict[str, float]]


def _relative(values: list[float], lower_is_better: bool = True) -> list[float]:
    """Where each value sits between the group's worst (0.0) and best (1.0); all 1.0 when
    the values are all equal."""
    low, high = min(values), max(values)
    if high - low <= 0:
        return [1.0] * len(values)
    return [((high - v) if lower_is_better else (v - low)) / (high - low) for v in values]


class CodegolfReward(Reward):
    """Shared set-up: the settings from the plugin's options and the shared program runner."""

    def __init__(self, context: RewardContext) -> None:
        super().__init__(context)
        self.settings = CodegolfSettings.from_options(context.options or {})
        self._runner: ProgramRunner | None = None

    @property
    def runner(self) -> ProgramRunner:
        if self._runner is None:
            from rollyard_codegolf.runner import shared_runner

            self._runner = shared_runner(self.settings)
        return self._runner

    async def records(self, samples: list[Sample], task: Task) -> list[dict[str, Any]]:
        return await self.runner.score_samples(samples, task)

    async def score(self, sample: Sample, task: Task) -> float:
        return (await self.score_group([sample], task))[0]  # type: ignore[return-value]


class CorrectReward(CodegolfReward):
    """Fraction of the hidden tests passed (``--codegolf-correct fraction``), or 1.0 only when
    all pass (``all``)."""

    name = "codegolf.correct"

    async def score_group(self, samples: list[Sample], task: Task) -> Scores:
        records = await self.records(samples, task)
        if self.settings.correct == "all":
            return [float(r["passed"] == r["total"] and r["total"] > 0) for r in records]
        return [float(r["fraction"]) for r in records]


class ConciseReward(CodegolfReward):
    """For programs that pass every hidden test: half for beating the reference length
    (min(1, reference / length)), half for being short within the group (1.0 shortest, 0.0
    longest of the passing ones). Programs that fail any test get 0."""

    name = "codegolf.concise"

    async def score_group(self, samples: list[Sample], task: Task) -> Scores:
        records = await self.records(samples, task)
        passing = [i for i, r in enumerate(records) if r["passed"] == r["total"] > 0]
        scores: Scores = [0.0] * len(records)
        if not passing:
            return scores
        within = _relative([float(records[i]["length"]) for i in passing])
        for i, rank in zip(passing, within):
            record = records[i]
            versus_reference = min(1.0, record["reference_len"] / max(1, record["length"]))
            scores[i] = 0.5 * versus_reference + 0.5 * rank
        return scores


class FastReward(CodegolfReward):
    """Group-relative speed of passing programs: total wall time over the hidden tests, 1.0
    for the fastest and 0.0 for the slowest passing program. Failing programs get 0."""

    name = "codegolf.fast"

    async def score_group(self, samples: list[Sample], task: Task) -> Scores:
        records = await self.records(samples, task)
        passing = [i for i, r in enumerate(records) if r["passed"] == r["total"] > 0]
        scores: Scores = [0.0] * len(records)
        if passing:
            for i, rank in zip(passing, _relative([float(records[i]["runtime"])
                                                   for i in passing])):
                scores[i] = rank
        return scores


REWARDS = (CorrectReward, ConciseReward, FastReward)
