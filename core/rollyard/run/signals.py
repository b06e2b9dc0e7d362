"""SIGINT (Ctrl-C) and SIGTERM during ``rollyard train``.

The first signal asks the run to stop after the step in progress: it saves a checkpoint, stops
the engines, the Ray actors and the sandboxes, and exits with 130 (SIGINT) or 143 (SIGTERM).
A step still going ``--stop-timeout`` seconds after the signal is abandoned: its rollout is
dropped and the last finished step is what is saved (once its update has begun, that is
possible only when the last finished step was saved already). A stop that cannot save says so
in one line (:class:`StopNotSaved`) and exits with 1. A second signal stops at once: every
process the run started is killed, nothing is saved.

Ctrl-C in a terminal, ``timeout``, Slurm and ``kill -TERM -PGID`` signal the whole process
group. The engines and the local Ray cluster run in sessions of their own
(:mod:`rollyard.run.ray_cluster`), so only the driver sees the signal, and the ranks are still
there to save their state; :mod:`rollyard.run.warden` ends them if the driver is killed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from rollyard.errors import RollyardError

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def exit_code(signum: int) -> int:
    """The shell's exit status for a process ended by ``signum`` (130, 143)."""
    return 128 + signum


class RunStopped(Exception):
    """The run stopped early because it was signalled; not an error. ``checkpoint`` is where
    its state was saved (None when no step had finished)."""

    def __init__(self, signum: int, step: int, checkpoint: Path | None,
                 run_dir: Path, abandoned: str | None = None) -> None:
        self.signum, self.step, self.checkpoint, self.run_dir = signum, step, checkpoint, run_dir
        self.exit_code = exit_code(signum)
        name = signal.Signals(signum).name
        if checkpoint is None:
            where = "no checkpoint was saved (no step had finished)"
        else:
            where = (f"checkpoint {checkpoint} (continue with: rollyard train --resume "
                     f"{run_dir})")
        why = f" ({abandoned})" if abandoned else ""
        super().__init__(f"stopped by {name} after step {step}{why}; {where}")


class StopNotSaved(RollyardError):
    """A signal asked the run to stop, and then it could not end in order: the state of its
    last finished step ``step`` could not be saved (the disk full, the trainer dead, an update
    still running past ``--stop-timeout``), or it was saved and the step after it failed.
    ``newest`` is the newest complete checkpoint, of step ``newest_step``."""

    def __init__(self, signum: int, step: int, reason: str, newest: Path | None,
                 newest_step: int = 0) -> None:
        self.signum, self.step = signum, step
        name = signal.Signals(signum).name
        if newest is not None and newest_step == step:
            line = (f"stopped by {name} after step {step}, then the run failed: {reason}; "
                    f"checkpoint {newest} holds step {step}")
        else:
            kept = f"the newest checkpoint is {newest}" if newest else "the run has no checkpoint"
            line = f"stopped by {name}, but step {step} could not be saved: {reason}; {kept}"
        super().__init__(line)


class StopSignals:
    """Installed while a run trains (``with StopSignals() as stop``); :attr:`signum` is the
    first signal received, None until then."""

    def __init__(self) -> None:
        self.signum: int | None = None
        #: when the first signal came (time.monotonic())
        self.at: float | None = None
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def overdue(self, timeout: float) -> bool:
        """Whether a stop was asked for more than ``timeout`` seconds ago."""
        return self.at is not None and time.monotonic() - self.at > timeout

    def __enter__(self) -> StopSignals:
        self.install()
        return self

    def install(self) -> None:
        """Handle SIGINT and SIGTERM here (again: ``ray.init`` sets its own SIGTERM handler
        in the driver, which exits at once). Only the main thread can; elsewhere the default
        handling stays."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(sig, previous)

    def __exit__(self, *_exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum, self.at = signum, time.monotonic()
            _say(f"rollyard: {name} received: stopping after the current step and saving a "
                 "checkpoint (signal again to stop at once, without saving)")
            return
        _say(f"rollyard: {name} received again: stopping now, without saving")
        kill_descendants()
        os._exit(exit_code(signum))


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def kill_descendants(timeout: float = 5.0) -> None:
    """SIGKILL every process this one started, and their children (engines, the local Ray
    cluster and its workers, sandboxes)."""
    import psutil

    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(children, timeout=timeout)
