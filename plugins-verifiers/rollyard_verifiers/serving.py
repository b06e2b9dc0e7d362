"""Share one async context (bridge server + verifiers ``env.serving()``) among concurrent groups.

The core may run many groups at once; they must share one verifiers interception server
(an ``Env`` serves one at a time), and the context must be entered and left by the same task.
An owner task holds the context while at least one user is inside; the last user out
closes it. A new event loop (a new run phase) starts from a clean state.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any


class SharedContext:
    """``async with shared.use() as value`` enters ``open_context()`` for the first user and
    leaves it after the last one."""

    def __init__(self, open_context: Callable[[], AbstractAsyncContextManager[Any]]) -> None:
        self._open = open_context
        self._loop: asyncio.AbstractEventLoop | None = None

    def _reset_for(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = asyncio.Lock()
        self._users = 0
        self._owner: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._value: Any = None

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._reset_for(loop)
        async with self._lock:
            if self._owner is None:
                await self._start()
            self._users += 1
            value = self._value
        try:
            yield value
        finally:
            async with self._lock:
                self._users -= 1
                if self._users == 0:
                    await self._close()

    async def _start(self) -> None:
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()

        async def own() -> None:
            try:
                async with self._open() as value:
                    ready.set_result(value)
                    await self._stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                    return
                raise

        self._owner = asyncio.get_running_loop().create_task(own())
        try:
            self._value = await ready
        except BaseException:
            self._owner = None
            raise

    async def _close(self) -> None:
        owner, self._owner = self._owner, None
        self._stop.set()
        if owner is not None:
            await owner
