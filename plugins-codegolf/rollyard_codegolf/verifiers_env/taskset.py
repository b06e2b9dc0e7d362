"""The verifiers Taskset, Task and config behind :mod:`rollyard_codegolf.verifiers_env`."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, Literal

import verifiers.v1 as vf
from pydantic import PrivateAttr

from rollyard_codegolf.options import CodegolfOptions
from rollyard_codegolf.parsing import extract_program
from rollyard_codegolf.prompting import build_prompt
from rollyard_codegolf.runner import ProgramRunner
from rollyard_codegolf.scoring import ProgramScore
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


class RunnerOnDemand:
    """The taskset's one program runner, built when the first program is scored (listing
    tasks needs no sandbox) and shared by its tasks and their copies."""

    def __init__(self, options: CodegolfOptions) -> None:
        self.options = options
        self._runner: ProgramRunner | None = None

    def get(self) -> ProgramRunner:
        if self._runner is None:
            self._runner = ProgramRunner(self.options)
        return self._runner

    def __deepcopy__(self, memo: dict[int, Any]) -> RunnerOnDemand:
        return self


class CodegolfVerifiersTask(vf.Task[CodegolfData, CodegolfState, CodegolfTaskConfig]):
    """One problem; the reply's last Python block is run on the hidden tests by the runner of
    the taskset that made it."""

    def __init__(self, data: CodegolfData, config: CodegolfTaskConfig | None = None,
                 runner: RunnerOnDemand | None = None) -> None:
        super().__init__(data, config)
        self.options = CodegolfOptions.of(self.config.options)
        self.runner = runner or RunnerOnDemand(self.options)

    @property
    def key(self) -> str:
        return self.data.codegolf["id"]

    @vf.reward(weight=1.0)
    async def correct(self, trace: Any) -> float:
        score = await self._score(trace)
        if self.options.correct == "all":
            return float(score.all_passed)
        return score.fraction

    @vf.reward(weight=0.5)
    async def concise(self, trace: Any) -> float:
        score = await self._score(trace)
        if not score.all_passed:
            return 0.0
        return min(1.0, self.data.codegolf["reference_len"] / max(1, score.length))

    async def _score(self, trace: Any) -> ProgramScore:
        """Run the program once per trace, however many rewards ask."""
        state = trace.state
        if state._score is None:
            problem = parse_task(self.data.codegolf, where=f"task {self.key!r}")
            code = extract_program(trace.last_reply, self.options.extract)
            state._score = asyncio.ensure_future(self.runner.get().score(code, problem))
        return await state._score


class CodegolfTaskset(vf.Taskset[CodegolfVerifiersTask, CodegolfTasksetConfig]):
    """The shipped code-golf problems (or ``options.tasks``) of one split, sorted by id."""

    def load(self) -> Iterator[CodegolfVerifiersTask]:
        options = CodegolfOptions.of(self.config.task.options)
        runner = RunnerOnDemand(options)
        problems: list[CodegolfTask] = split_tasks(load_tasks(options.tasks), self.config.split)
        for problem in problems:
            text = {m["role"]: m["content"] for m in build_prompt(problem)}
            yield CodegolfVerifiersTask(
                CodegolfData(id=problem.id, name=problem.title, system_prompt=text["system"],
                             prompt=text["user"], codegolf=problem.as_dict()),
                self.config.task, runner)
