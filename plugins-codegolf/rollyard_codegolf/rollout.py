"""The ``codegolf`` rollout: ask for the shortest program and return the replies.

It only generates. The rewards run each reply's program in the sandbox, once per sample,
through :class:`~rollyard_codegolf.evaluator.CodegolfEvaluator`, which also reports the
outcome metrics (``codegolf/passed`` …).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rollyard import Rollout, RolloutContext, Sample, Task

from rollyard_codegolf.options import PREFIX, CodegolfOptions
from rollyard_codegolf.tasks import load_tasks, split_tasks


class CodegolfRollout(Rollout):
    """Single-turn code golf: one reply per episode, in ``metadata["completion"]``."""

    name = "codegolf"
    Options = CodegolfOptions
    options_prefix = PREFIX
    default_rewards = CodegolfOptions().reward_weights

    def __init__(self, context: RolloutContext) -> None:
        super().__init__(context)
        self.options = CodegolfOptions.of(context.options)
        problems = load_tasks(self.options.tasks)
        self._splits = {split: [p.to_task() for p in split_tasks(problems, split)]
                        for split in ("train", "eval")}

    @classmethod
    def reward_weights(cls, options: CodegolfOptions | Mapping[str, Any] | None
                       ) -> dict[str, float]:
        """The default rewards, weighted by ``--codegolf-weight-*``."""
        return CodegolfOptions.of(options).reward_weights

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in self._splits:
            raise ValueError(f"codegolf has splits 'train' and 'eval', not {split!r}")
        return self._splits[split]

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        from rollyard.episodes import sample_single_turn

        return await sample_single_turn(self.context, task, n)
