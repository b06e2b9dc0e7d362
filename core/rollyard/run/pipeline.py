"""Rollouts that run ahead of training (``--async``).

The rollouts of a run's steps run one after another, each as soon as the trainer is close
enough: the rollout of step ``t`` starts once its previous rollout is done and the steps up to
``t - 1 - ahead`` are trained (and their weights pushed). ``ahead = 0`` is the synchronous loop
(rollout, train, rollout …); ``ahead = K`` lets the rollouts run up to ``K`` steps ahead, so a
sample is at most ``K`` weight updates older than the policy it trains.

Rollouts never run side by side, so tasks are drawn in the same order as in a synchronous run.
Before a rollout draws anything, the pipeline keeps a snapshot of the driver's state (task
cursor, rollout workers' states): a checkpoint of the step before it holds that state, as if
the rollout had not started — a rollout that runs ahead, or one begun just before a signal
stopped the run, or abandoned at ``--stop-timeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
S = TypeVar("S")


class RolloutPipeline(Generic[T, S]):
    """Runs ``rollout(step)`` for steps ``first..last``, at most ``ahead`` steps ahead of the
    last step reported by :meth:`trained`; ``snapshot()`` is taken before each rollout."""

    def __init__(self, rollout: Callable[[int], Awaitable[T]], first: int, last: int,
                 ahead: int, snapshot: Callable[[], Awaitable[S]]) -> None:
        self._rollout, self._snapshot = rollout, snapshot
        self.first, self.last, self.ahead = first, last, ahead
        self._trained = first - 1
        self._progress = asyncio.Event()
        self._results: dict[int, asyncio.Future[T]] = {}
        self._snapshots: dict[int, asyncio.Future[S]] = {}
        self._producer: asyncio.Task | None = None

    def start(self) -> None:
        self._producer = asyncio.ensure_future(self._produce())

    async def _produce(self) -> None:
        loop = asyncio.get_running_loop()
        for step in range(self.first, self.last + 1):
            while self._trained < step - 1 - self.ahead:
                self._progress.clear()
                await self._progress.wait()
            result = self._results.setdefault(step, loop.create_future())
            try:
                # registered before anything is drawn: a save of step - 1 waits for it
                snapshot = self._snapshots[step] = loop.create_future()
                try:
                    snapshot.set_result(await self._snapshot())
                except BaseException as exc:  # a save waiting for it must not wait forever
                    snapshot.set_exception(exc if isinstance(exc, Exception)
                                           else RuntimeError("the rollout was dropped"))
                    snapshot.exception()  # retrieved: only a save that waits for it raises it
                    raise
                result.set_result(await self._rollout(step))
            except Exception as exc:  # the step that needs it raises it
                if not result.done():
                    result.set_exception(exc)
                return

    async def take(self, step: int) -> T:
        """The rollout of ``step`` (waiting for it; raising what it raised)."""
        result = self._results.setdefault(step, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.shield(result)
        finally:
            del self._results[step]
            self._snapshots.pop(step, None)  # a save of step - 1 is past

    def trained(self, step: int) -> None:
        """Steps up to ``step`` are trained and their weights pushed."""
        self._trained = step
        self._progress.set()

    async def snapshot_before(self, step: int) -> S | None:
        """The state taken before the rollout of ``step`` began, or None if it has not begun
        (the current state is then the one to keep)."""
        snapshot = self._snapshots.get(step)
        if snapshot is None:
            return None
        return await asyncio.shield(snapshot)

    async def close(self) -> None:
        """Drop a rollout still running ahead (its samples are never trained)."""
        if self._producer is not None and not self._producer.done():
            self._producer.cancel()
        if self._producer is not None:
            with contextlib.suppress(BaseException):
                await self._producer
        for future in self._results.values():
            if future.done() and not future.cancelled():
                future.exception()  # retrieved: a dropped rollout's error is not reported
