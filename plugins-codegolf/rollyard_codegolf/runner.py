"""Score programs from async code: one sandbox and a bounded thread pool.

The scorer behind the rewards (through :class:`~rollyard_codegolf.evaluator.CodegolfEvaluator`)
and the verifiers taskset. Whoever builds a runner owns it and closes it; there is no shared
instance.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rollyard import ConfigError

from rollyard_codegolf.feedback import FailedCase, first_failure
from rollyard_codegolf.options import CodegolfOptions
from rollyard_codegolf.sandbox import Sandbox, SandboxUnavailable
from rollyard_codegolf.scoring import ProgramScore, score_program
from rollyard_codegolf.tasks import CodegolfTask


class ProgramRunner:
    """A sandbox and at most ``options.workers`` programs running at once.

    Construction raises ConfigError when programs cannot be sandboxed here (and
    ``--codegolf-unsafe-no-sandbox`` was not given).
    """

    def __init__(self, options: CodegolfOptions) -> None:
        self.options = options
        try:
            self.sandbox = Sandbox(options.limits, options.unsafe_no_sandbox, options.python)
        except SandboxUnavailable as exc:
            raise ConfigError(f"codegolf: {exc}") from exc
        self._pool = ThreadPoolExecutor(options.workers, thread_name_prefix="codegolf")

    async def score(self, code: str | None, task: CodegolfTask) -> ProgramScore:
        """Score one program on the task's hidden tests without blocking the event loop;
        raises SandboxUnavailable when the sandbox itself broke."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, score_program, code, task, self.sandbox)

    async def first_failure(self, code: str | None, task: CodegolfTask) -> FailedCase | None:
        """The first test case ``code`` fails (feedback mode), without blocking the loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, first_failure, code, task, self.sandbox)

    def close(self) -> None:
        """Stop the thread pool once the programs running now are done. Safe to call twice."""
        self._pool.shutdown(wait=True)

    def __deepcopy__(self, memo: dict[int, Any]) -> ProgramRunner:
        """A runner is a resource: copies of its holder (verifiers copies tasks) share it."""
        return self
