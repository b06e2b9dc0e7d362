"""The one sandbox run per sample that every codegolf reward reads."""

from __future__ import annotations

import asyncio
from collections import Counter

from rollyard import RewardContext, Sample, Task
from rollyard.evaluators import Evaluator

from rollyard_codegolf.options import CodegolfOptions
from rollyard_codegolf.parsing import extract_program
from rollyard_codegolf.runner import ProgramRunner
from rollyard_codegolf.scoring import ProgramResult, ProgramScore
from rollyard_codegolf.tasks import CodegolfTask

#: Where a sample's program and its score are recorded for the sample tables.
METADATA_KEY = "codegolf"


class CodegolfEvaluator(Evaluator[ProgramResult]):
    """Runs each sample's program (from ``sample.completion``) on the task's hidden tests
    in the sandbox, once per group for all codegolf rewards, and records the outcome in
    ``metadata["codegolf"]``.

    Metrics since the last call: the share of programs per outcome (``codegolf/passed``,
    ``codegolf/no_code``, ``codegolf/wrong_answer`` …) and the mean length of passing
    programs (``codegolf/passing_length``).
    """

    def __init__(self, context: RewardContext) -> None:
        super().__init__(context)
        self.options = CodegolfOptions.of(context.options)
        self.runner = ProgramRunner(self.options)  # refuses here when it cannot sandbox
        self._outcomes: Counter[str] = Counter()
        self._lengths: list[int] = []

    async def evaluate(self, samples: list[Sample], task: Task) -> list[ProgramResult]:
        """Each sample's program and score; a sample whose sandbox broke is marked failed
        (reason ``sandbox_error``) instead of being scored 0 for the machine's fault."""
        problem = CodegolfTask.from_task(task)
        results = await asyncio.gather(*(self._one(s, problem) for s in samples))
        for result in results:
            self._outcomes[result.score.reason or "passed"] += 1
            if result.score.reason is None:
                self._lengths.append(result.score.length)
        return results

    async def _one(self, sample: Sample, problem: CodegolfTask) -> ProgramResult:
        program = extract_program(sample.completion or "",
                                  self.options.extract)
        try:
            score = await self.runner.score(program, problem)
        except Exception as exc:  # the sandbox broke: fail this sample, keep the group
            sample.fail(f"codegolf sandbox raised {exc!r}")
            score = ProgramScore(0, len(problem.hidden), "sandbox_error", 0.0, 0, repr(exc))
        result = ProgramResult(program, score, problem.reference_len)
        sample.metadata[METADATA_KEY] = result.as_record()
        return result

    def metrics(self) -> dict[str, float]:
        total = sum(self._outcomes.values())
        metrics = {f"codegolf/{outcome}": count / total
                   for outcome, count in self._outcomes.items()}
        if self._lengths:
            metrics["codegolf/passing_length"] = sum(self._lengths) / len(self._lengths)
        self._outcomes.clear()
        self._lengths.clear()
        return metrics

    async def close(self) -> None:
        await asyncio.to_thread(self.runner.close)
