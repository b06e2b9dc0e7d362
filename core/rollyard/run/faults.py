"""Fault injection, for tests of what a run survives.

``ROLLYARD_FAULT=ACTION:POINT@STEP`` makes the run fail when it reaches ``POINT`` at step
``STEP`` (``@STEP`` left out: at every step). ACTION is

* ``kill`` — SIGKILL this process, as a crash, the OOM killer or a scheduler's hard kill would;
* ``raise`` — raise ``OSError(ENOSPC)``, as a full disk would;
* ``pause`` — wait there (up to :data:`PAUSE_LIMIT_S`) until the run is signalled, so that a
  test can signal or kill it at a known point.

POINTs: ``train`` (a step's samples are drawn, earlier saves are complete, the update has not
started), and the stages of a
checkpoint save: ``save:trainer`` (the Megatron state is written), ``save:written`` (every part
is written and synced, the folder not yet renamed), ``save:renamed`` (the folder is complete,
the ``latest`` pointer not yet moved to it).
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from collections.abc import Callable

ENV = "ROLLYARD_FAULT"
ACTIONS = ("kill", "raise", "pause")
PAUSE_LIMIT_S = 600.0


def fault_point(point: str, step: int, stop_requested: Callable[[], bool] = lambda: False,
                ) -> None:
    """Fail here as ``ROLLYARD_FAULT`` asks, if it names ``point`` (at ``step``)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    action, _, where = spec.partition(":")
    name, _, at = where.partition("@")
    if action not in ACTIONS:
        raise ValueError(f"{ENV}={spec!r}: action {action!r} is not one of {ACTIONS}")
    if name != point or (at and int(at) != step):
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "raise":
        raise OSError(errno.ENOSPC, f"No space left on device (injected by {ENV}={spec})")
    sys.stderr.write(f"rollyard: paused at {point} (step {step}) by {ENV}={spec}\n")
    sys.stderr.flush()
    deadline = time.monotonic() + PAUSE_LIMIT_S
    while not stop_requested() and time.monotonic() < deadline:
        time.sleep(0.05)
