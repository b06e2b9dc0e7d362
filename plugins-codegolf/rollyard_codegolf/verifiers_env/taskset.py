"""The verifiers Taskset, Task and config behind :mod:`rollyard_codegolf.verifiers_env`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Literal

import verifiers.v1 as vf
from pydantic import PrivateAttr

from rollyard_codegolf.parsing import extract_program
from rollyard_codegolf.prompting import build_prompt
from rollyard_codegolf.runner import shared_runner
from rollyard_codegolf.scoring import ProgramScore
from rollyard_codegolf.settings import CodegolfSettings
from rollyard_codegolf.tasks import CodegolfTask, load_tasks, parse_task, split_tasks


class CodegolfTaskConfig(vf.TaskConfig):
    """Per-task settings: the code-golf plugin's options, without the prefix."""

    options: dict[str, Any] = {}


class CodegolfTasksetConfig(vf.TasksetConfig):
    split: Literal["train", "eval"] = "train"
    """Which of the code-golf plugin's stable splits to pose."""
    task: CodegolfTaskConfig = CodegolfTaskConfig()


class CodegolfData(vf.TaskData):
    codegolf: dict[str, Any]
    """The problem as ``CodegolfTask.as_dict()`` (tests, reference …)."""


class CodegolfState(vf.State):
    """Per-trace scratch: the one sandbox run both rewards read."""

    _score: asyncio.Future[ProgramScore] | None = PrivateAttr(default=None)


class CodegolfVerifiersTask(vf.Task[CodegolfData, CodegolfState, CodegolfTaskConfig]):
    """One problem; the reply's last Python block is run on the hidden tests."""

    @property
    def key(self) -> str:
        return self.data.codegolf["id"]

    @vf.reward(weight=1.0)
    async def correct(self, trace: Any) -> float:
        score = await self._score(trace)
        if self._settings().correct == "all":
            return float(score.all_passed)
        return score.fraction

    @vf.reward(weight=0.5)
    async def concise(self, trace: Any) -> float:
        score = await self._score(trace)
        if not score.all_passed:
            return 0.0
        return min(1.0, self.data.codegolf["reference_len"] / max(1, score.length))

    def _settings(self) -> CodegolfSettings:
        return CodegolfSettings.from_options(self.config.options)

    async def _score(self, trace: Any) -> ProgramScore:
        """Run the program once per trace, however many rewards ask."""
        state = trace.state
        if state._score is None:
            settings = self._settings()
            problem = parse_task(self.data.codegolf, where=f"task {self.key!r}")
            code = extract_program(trace.last_reply, settings.extract)  # type: ignore[arg-type]
            state._score = asyncio.ensure_future(shared_runner(settings).score(code, problem))
        return await state._score


class CodegolfTaskset(vf.Taskset[CodegolfVerifiersTask, CodegolfTasksetConfig]):
    """The shipped code-golf problems (or ``options.tasks``) of one split, sorted by id."""

    def load(self) -> Iterator[CodegolfVerifiersTask]:
        settings = CodegolfSettings.from_options(self.config.task.options)
        problems: list[CodegolfTask] = split_tasks(load_tasks(settings.tasks_path),
                                                   self.config.split)
        for problem in problems:
            text = {m["role"]: m["content"] for m in build_prompt(problem)}
            yield CodegolfVerifiersTask(
                CodegolfData(id=problem.id, name=problem.title, system_prompt=text["system"],
                             prompt=text["user"], codegolf=problem.as_dict()),
                self.config.task)
