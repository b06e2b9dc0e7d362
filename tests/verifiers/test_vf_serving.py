"""SharedContext: one serving context for all concurrent groups, entered and left by one task."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
from rollyard import GenerateResult
from rollyard.testing import ScriptedTransport
from rollyard_verifiers import bridge as bridge_module
from rollyard_verifiers.bridge import Bridge
from rollyard_verifiers.serving import SharedContext


class Counting:
    """An async context that counts how often it was opened and which tasks used it."""

    def __init__(self, fail: bool = False) -> None:
        self.opened = self.closed = 0
        self.fail = fail
        self.tasks: set[asyncio.Task] = set()

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[int]:
        self.tasks.add(asyncio.current_task())
        if self.fail:
            raise OSError("port in use")
        self.opened += 1
        try:
            yield self.opened
        finally:
            self.closed += 1
            self.tasks.add(asyncio.current_task())


def test_concurrent_users_share_one_context_closed_by_its_opener() -> None:
    counting = Counting()
    shared = SharedContext(counting.open)

    async def user(delay: float) -> int:
        async with shared.use() as value:
            await asyncio.sleep(delay)
            return value

    async def main() -> tuple[list[int], int]:
        first = await asyncio.gather(*(user(0.01 * i) for i in range(5)))
        second = await user(0)  # after the last user left, a fresh context opens
        return first, second

    first, second = asyncio.run(main())
    assert first == [1] * 5 and second == 2
    assert (counting.opened, counting.closed) == (2, 2)
    assert len(counting.tasks) == 2  # one owner task per opening, never a user task


def test_a_failing_open_reaches_every_user_and_can_be_retried() -> None:
    counting = Counting(fail=True)
    shared = SharedContext(counting.open)

    async def main() -> None:
        with pytest.raises(OSError, match="port in use"):
            async with shared.use():
                pass
        counting.fail = False
        async with shared.use() as value:
            assert value == 1

    asyncio.run(main())


def test_session_records_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bridge_module, "MAX_SESSIONS", 2)
    bridge = Bridge(ScriptedTransport([GenerateResult([5], [-0.1], "stop", 7)]))

    async def main() -> None:
        for session in ("a", "b", "c"):
            await bridge.generate({"token_ids": [1], "sampling_params": {"max_tokens": 1}},
                                  session)

    asyncio.run(main())
    assert bridge.pop_session("a").weight_versions == []  # the oldest was dropped
    assert bridge.pop_session("b").weight_versions == [7]
    assert bridge.pop_session("c").weight_versions == [7]
