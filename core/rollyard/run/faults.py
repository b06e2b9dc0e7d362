"""Fault injection, for tests of what a run survives.

``ROLLYARD_FAULT=ACTION:POINT@STEP`` makes the run fail when it reaches ``POINT`` at step
``STEP`` (``@STEP`` left out: at every step); several, comma-separated, each act at their own
point. ACTION is

* ``kill`` — SIGKILL this process, as a crash, the OOM killer or a scheduler's hard kill would;
* ``raise`` — raise ``OSError(ENOSPC)``, as a full disk would;
* ``pause`` — wait there (up to :data:`PAUSE_LIMIT_S`) until the run is signalled, so that a
  test can signal or kill it at a known point;
* ``stall`` — at ``rollout`` only: the rollout workers take :data:`PAUSE_LIMIT_S` over the
  step's episodes, signal or not, as a step that takes minutes would (the driver says so when
  the step's rollout begins).

POINTs: ``rollout`` (the step's rollout begins), ``group`` (an env server starts one of the
step's groups; docs/remote.md), ``train`` (a step's samples are drawn,
earlier saves are complete, the update has not started), and the stages of a checkpoint save:
``save:trainer`` (the Megatron state is written), ``save:written`` (every part is written and
synced, the folder not yet renamed), ``save:renamed`` (the folder is complete, the ``latest``
pointer not yet moved to it).
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import sys
import time
from collections.abc import Callable

ENV = "ROLLYARD_FAULT"
ACTIONS = ("kill", "raise", "pause", "stall")
PAUSE_LIMIT_S = 600.0


def _action_at(point: str, step: int) -> tuple[str, str] | None:
    """The action ``ROLLYARD_FAULT`` names for ``point`` at ``step``, and its spec."""
    for spec in filter(None, os.environ.get(ENV, "").split(",")):
        action, _, where = spec.partition(":")
        name, _, at = where.partition("@")
        if action not in ACTIONS:
            raise ValueError(f"{ENV}={spec!r}: action {action!r} is not one of {ACTIONS}")
        if name == point and (not at or int(at) == step):
            return action, spec
    return None


def fault_point(point: str, step: int, stop_requested: Callable[[], bool] = lambda: False,
                ) -> None:
    """Fail here as ``ROLLYARD_FAULT`` asks, if it names ``point`` (at ``step``)."""
    found = _action_at(point, step)
    if found is None:
        return
    action, spec = found
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "raise":
        raise OSError(errno.ENOSPC, f"No space left on device (injected by {ENV}={spec})")
    verb = "stalling the rollout workers" if action == "stall" else "paused"
    sys.stderr.write(f"rollyard: {verb} at {point} (step {step}) by {ENV}={spec}\n")
    sys.stderr.flush()
    if action == "stall":
        return  # the workers stall (stall_point); the driver waits for them as for any step
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while not stop_requested() and time.monotonic() < deadline:
        time.sleep(0.05)


async def stall_point(point: str, step: int) -> None:
    """Where the work of ``point`` is done (a rollout worker): take :data:`PAUSE_LIMIT_S`
    when ``ROLLYARD_FAULT`` has ``stall`` at ``point`` (at ``step``)."""
    found = _action_at(point, step)
    if found is not None and found[0] == "stall":
        await asyncio.sleep(PAUSE_LIMIT_S)
