"""Score programs from async code on a bounded thread pool, caching results on samples."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rollyard import ConfigError, Sample, SampleStatus, Task

from rollyard_codegolf.parsing import extract_program
from rollyard_codegolf.sandbox import Sandbox, SandboxUnavailable
from rollyard_codegolf.scoring import ProgramScore, score_program
from rollyard_codegolf.settings import CodegolfSettings
from rollyard_codegolf.tasks import CodegolfTask

#: Where a sample's program and its score are recorded.
METADATA_KEY = "codegolf"


class ProgramRunner:
    """A sandbox and at most ``settings.workers`` programs running at once."""

    def __init__(self, settings: CodegolfSettings) -> None:
        self.settings = settings
        try:
            self.sandbox = Sandbox(settings.limits, settings.unsafe_no_sandbox, settings.python)
        except SandboxUnavailable as exc:
            raise ConfigError(f"codegolf: {exc}") from exc
        self._pool = ThreadPoolExecutor(settings.workers, thread_name_prefix="codegolf")

    async def score(self, code: str | None, task: CodegolfTask) -> ProgramScore:
        """Score one program on the task's hidden tests without blocking the event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, score_program, code, task, self.sandbox)

    async def score_samples(self, samples: list[Sample], task: Task) -> list[dict[str, Any]]:
        """Each sample's record ``sample.metadata["codegolf"]``: the program taken from
        ``metadata["completion"]`` and its score; computed once, then reused."""
        problem = CodegolfTask.from_task(task)

        async def one(sample: Sample) -> dict[str, Any]:
            record = sample.metadata.get(METADATA_KEY)
            if isinstance(record, dict) and "passed" in record:
                return record
            code = extract_program(str(sample.metadata.get("completion", "")),
                                   self.settings.extract)  # type: ignore[arg-type]
            try:
                score = await self.score(code, problem)
            except Exception as exc:  # the sandbox broke: fail this sample, keep the group
                sample.status = SampleStatus.FAILED
                sample.metadata["failure"] = f"codegolf sandbox raised {exc!r}"
                score = ProgramScore(0, len(problem.hidden), "sandbox_error", 0.0, 0, repr(exc))
            record = {"program": code, "reference_len": problem.reference_len,
                      **score.as_dict()}
            sample.metadata[METADATA_KEY] = record
            return record

        return list(await asyncio.gather(*(one(s) for s in samples)))


@functools.lru_cache(maxsize=8)
def shared_runner(settings: CodegolfSettings) -> ProgramRunner:
    """One runner per distinct settings in this process, shared by the rollout and rewards."""
    return ProgramRunner(settings)
