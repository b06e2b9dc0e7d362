"""The ``codegolf`` rollout: ask for the shortest program, run what comes back in the sandbox."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rollyard import Rollout, RolloutContext, Sample, Task

from rollyard_codegolf.settings import CodegolfSettings
from rollyard_codegolf.tasks import load_tasks, split_tasks


class CodegolfRollout(Rollout):
    """Single-turn code golf. Each episode's program is scored on the task's hidden tests in
    the sandbox before the group is returned; the rewards read that record."""

    name = "codegolf"
    default_rewards = {"codegolf.correct": 1.0, "codegolf.concise": 0.2, "codegolf.fast": 0.0}

    def __init__(self, context: RolloutContext) -> None:
        from rollyard_codegolf.runner import shared_runner

        super().__init__(context)
        self.settings = CodegolfSettings.from_options(context.options or {})
        problems = load_tasks(self.settings.tasks_path)
        self._splits = {split: [p.to_task() for p in split_tasks(problems, split)]
                        for split in ("train", "eval")}
        self.runner = shared_runner(self.settings)  # refuses here when it cannot sandbox
        self._reasons: Counter[str] = Counter()
        self._lengths: list[int] = []

    @classmethod
    def reward_weights(cls, options: dict) -> dict[str, float]:
        """``--codegolf-weight-*`` options override the default weights."""
        weights = dict(cls.default_rewards)
        weights.update(CodegolfSettings.from_options(options or {}).weights)
        return weights

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in self._splits:
            raise ValueError(f"codegolf has splits 'train' and 'eval', not {split!r}")
        return self._splits[split]

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        from rollyard.episodes import sample_single_turn

        samples = await sample_single_turn(self.context, task, n)
        usable = [s for s in samples if s.usable]
        for record in await self.runner.score_samples(usable, task):
            self._reasons[record["reason"] or "passed"] += 1
            if record["reason"] is None:
                self._lengths.append(record["length"])
        return samples

    def metrics(self) -> dict[str, float]:
        """Share of programs per outcome (``codegolf/passed``, ``codegolf/no_code`` …) and
        the mean length of passing programs, since the last call."""
        total = sum(self._reasons.values())
        metrics = {f"codegolf/{reason}": count / total for reason, count in self._reasons.items()}
        if self._lengths:
            metrics["codegolf/passing_length"] = sum(self._lengths) / len(self._lengths)
        self._reasons.clear()
        self._lengths.clear()
        return metrics
