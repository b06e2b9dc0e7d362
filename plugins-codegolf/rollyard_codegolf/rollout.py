"""The ``codegolf`` rollout: ask for the shortest program and return the replies.

In its default single-turn mode it only generates. The rewards run each reply's program in
the sandbox, once per sample, through :class:`~rollyard_codegolf.evaluator.CodegolfEvaluator`,
which also reports the outcome metrics (``codegolf/passed`` …). With ``--codegolf-attempts K``
each episode is a conversation (:class:`rollyard.episodes.Conversation`): a failing program's
first failing test case goes back to the model, up to K programs; the rewards score the last.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rollyard import Rollout, RolloutContext, Sample, SampleStatus, Task

from rollyard_codegolf.options import PREFIX, CodegolfOptions
from rollyard_codegolf.parsing import extract_program
from rollyard_codegolf.runner import ProgramRunner
from rollyard_codegolf.tasks import CodegolfTask, load_tasks, split_tasks

if TYPE_CHECKING:
    from rollyard.episodes import Conversation


class CodegolfRollout(Rollout):
    """Code golf: one reply per episode, in ``sample.completion`` (with
    ``--codegolf-attempts K``, up to K replies, the failures shown between them; the last one
    is the completion)."""

    name = "codegolf"
    Options = CodegolfOptions
    options_prefix = PREFIX
    default_rewards = CodegolfOptions().reward_weights

    def __init__(self, context: RolloutContext) -> None:
        super().__init__(context)
        self.options: CodegolfOptions = context.options  # decoded by the core
        problems = load_tasks(self.options.tasks)
        self._splits = {split: [p.to_task() for p in split_tasks(problems, split)]
                        for split in ("train", "eval")}
        self._program_runner: ProgramRunner | None = None

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
        from rollyard.episodes import sample_multi_turn, sample_single_turn

        if self.options.attempts == 1:
            return await sample_single_turn(self.context, task, n)
        return await sample_multi_turn(self.context, task, n, self._attempts)

    async def _attempts(self, conv: Conversation) -> Sample:
        """Up to ``--codegolf-attempts`` programs, each failure shown to the model."""
        problem = CodegolfTask.from_task(conv.task)
        for attempt in range(1, self.options.attempts + 1):
            turn = await conv.generate()
            if attempt == self.options.attempts or conv.truncated:
                break
            program = extract_program(turn.text, self.options.extract)
            failure = await self._runner().first_failure(program, problem)
            if failure is None or not conv.add_message("user", failure.message()):
                break
        cut = SampleStatus.TRUNCATED if turn.finish_reason == "length" else None
        return conv.sample(cut, attempts=conv.turns)

    def _runner(self) -> ProgramRunner:
        """The sandbox that runs the attempts, built on first use."""
        if self._program_runner is None:
            self._program_runner = ProgramRunner(self.options)
        return self._program_runner
