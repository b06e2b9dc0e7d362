"""Rewards ``codegolf.correct``, ``codegolf.concise`` and ``codegolf.fast``.

All three read one :class:`~rollyard_codegolf.evaluator.CodegolfEvaluator` result per sample:
in a run the core evaluates each group once (each program runs once per sample, whichever of
these rewards are applied) and passes the results to each reward. Any rollout that puts the
model's reply in ``sample.completion`` and poses tasks made by ``CodegolfTask.to_task``
can use them. A score of 0 has its reason in ``metadata["codegolf"]["reason"]``.
"""

from __future__ import annotations

from collections.abc import Sequence

from rollyard import RewardContext, Sample, Task
from rollyard.evaluators import EvaluatedReward, Score

from rollyard_codegolf.evaluator import CodegolfEvaluator
from rollyard_codegolf.options import PREFIX, CodegolfOptions
from rollyard_codegolf.scoring import ProgramResult


def _relative(values: list[float], lower_is_better: bool = True) -> list[float]:
    """Where each value sits between the group's worst (0.0) and best (1.0); all 1.0 when
    the values are all equal."""
    low, high = min(values), max(values)
    if high - low <= 0:
        return [1.0] * len(values)
    return [((high - v) if lower_is_better else (v - low)) / (high - low) for v in values]


class CodegolfReward(EvaluatedReward[ProgramResult]):
    """What the three rewards share: the ``--codegolf-*`` options and the evaluator."""

    Options = CodegolfOptions
    options_prefix = PREFIX
    evaluator = CodegolfEvaluator

    def __init__(self, context: RewardContext) -> None:
        super().__init__(context)
        self.options: CodegolfOptions = context.options  # decoded by the core


class CorrectReward(CodegolfReward):
    """Fraction of the hidden tests passed (``--codegolf-correct fraction``), or 1.0 only when
    all pass (``all``)."""

    name = "codegolf.correct"

    async def score_evaluated(self, samples: list[Sample], task: Task,
                              results: Sequence[ProgramResult]) -> list[Score]:
        if self.options.correct == "all":
            return [float(r.score.all_passed) for r in results]
        return [r.score.fraction for r in results]


class ConciseReward(CodegolfReward):
    """For programs that pass every hidden test: half for beating the reference length
    (min(1, reference / length)), half for being short within the group (1.0 shortest, 0.0
    longest of the passing ones). Programs that fail any test get 0."""

    name = "codegolf.concise"

    async def score_evaluated(self, samples: list[Sample], task: Task,
                              results: Sequence[ProgramResult]) -> list[Score]:
        passing = [i for i, r in enumerate(results) if r.score.all_passed]
        scores: list[Score] = [0.0] * len(results)
        within = _relative([float(results[i].score.length) for i in passing]) if passing else []
        for i, rank in zip(passing, within):
            result = results[i]
            versus_reference = min(1.0, result.reference_len / max(1, result.score.length))
            scores[i] = 0.5 * versus_reference + 0.5 * rank
        return scores


class FastReward(CodegolfReward):
    """Group-relative speed of passing programs: total wall time over the hidden tests, 1.0
    for the fastest and 0.0 for the slowest passing program. Failing programs get 0."""

    name = "codegolf.fast"

    async def score_evaluated(self, samples: list[Sample], task: Task,
                              results: Sequence[ProgramResult]) -> list[Score]:
        passing = [i for i, r in enumerate(results) if r.score.all_passed]
        scores: list[Score] = [0.0] * len(results)
        runtimes = [results[i].score.runtime for i in passing]
        for i, rank in zip(passing, _relative(runtimes) if passing else []):
            scores[i] = rank
        return scores


REWARDS = (CorrectReward, ConciseReward, FastReward)
