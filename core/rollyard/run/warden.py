"""The warden: a small process that outlives a killed driver and ends what its run started.

A run's processes sit in sessions of their own (the local Ray cluster, every engine), so that
a signal meant for the run's process group reaches only the driver, which stops them in order
(:mod:`rollyard.run.signals`). The price is that nothing ends them when the driver dies by
SIGKILL (the OOM killer, ``kill -9``, a scheduler's hard kill). The warden does: the driver
starts it first, in a session of its own, holding the only write end of a pipe that is the
warden's stdin. The kernel closes that end when the driver dies, however it dies; the warden
reads end-of-file and SIGKILLs the run's processes and their children (a sandbox):

* every process in a session that one of the driver's descendants led or sat in (the warden
  looks every :data:`POLL_S` seconds; Ray's workers sit in its head's session), but the
  driver's own session, which is the user's, those of processes it had started before the
  run (a test's fixtures, when the run is in-process), and one whose id (its leader's pid)
  a new leader took after the run's emptied it;
* every process that carries the run's mark, the environment variable :data:`MARK_ENV` that the
  driver sets before it starts anything (one started since the last look). A process that
  rewrites its command line over its environment (Ray's ``ray::…`` titles) loses the mark,
  which is why sessions come first.

Folders the driver names on the pipe (:meth:`Warden.remove_after`: the local Ray cluster's)
are removed after the sweep. At a normal end the driver has stopped everything itself; it
closes the pipe and the warden's sweep finds only what was left over.

Run as ``python -m rollyard.run.warden MARK DRIVER_PID [SPARED_SESSION,…]``.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable

#: The environment variable that marks the processes of one run (its value: the run's mark).
MARK_ENV = "ROLLYARD_RUN_MARK"
#: How long a sweep goes on killing what keeps appearing (a process forked meanwhile).
SWEEP_SECONDS = 5.0
#: How often the warden looks which sessions the driver's descendants are in.
POLL_S = 1.0


def leader_birth(sid: int) -> float | None:
    """When the process whose pid is ``sid`` started (None: there is none). A session's id
    is its leader's pid, which the kernel gives out again once the session is empty: a session
    seen with one leader and found later with another is somebody else's."""
    import psutil

    try:
        return psutil.Process(sid).create_time()
    except psutil.Error:
        return None


class Sessions:
    """The sessions the driver's descendants sit in, each with its leader's start time as
    first seen, but ``spared``."""

    def __init__(self, spared: set[int]) -> None:
        self.spared = spared
        self.seen: dict[int, float | None] = {}

    def look(self, driver) -> None:
        """Add the sessions of ``driver``'s descendants (``driver``: a psutil.Process)."""
        import psutil

        try:
            if not driver.is_running():  # gone (or its pid someone else's)
                return
            children = driver.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            try:
                sid = os.getsid(child.pid)
            except OSError:
                continue
            if sid not in self.spared and sid not in self.seen:
                self.seen[sid] = leader_birth(sid)

    def still_ours(self) -> set[int]:
        """The sessions whose id no other session took meanwhile: the same leader, or a
        leader that has died (its members keep the id)."""
        ours = set()
        for sid, born in self.seen.items():
            now = leader_birth(sid)
            if now == born or (born is not None and now is None):
                ours.add(sid)
        return ours


def run_processes(mark: str, sessions: Iterable[int] = (),
                  spare: frozenset[int] = frozenset()) -> list:
    """The live processes (psutil) in ``sessions`` or carrying ``mark``, and their
    descendants, but ``spare`` and this process."""
    import psutil

    sessions = set(sessions)
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) in sessions or proc.environ().get(MARK_ENV) == mark:
                found[proc.pid] = proc
                found.update((child.pid, child) for child in proc.children(recursive=True))
        except (OSError, psutil.Error):
            continue
    return [proc for pid, proc in found.items() if pid not in spare and pid != os.getpid()]


def sweep(mark: str, sessions: Iterable[int] = (), spare: frozenset[int] = frozenset()) -> int:
    """SIGKILL every process :func:`run_processes` finds, again until none is left (or
    :data:`SWEEP_SECONDS` passed); returns how many were killed."""
    import psutil

    killed: set[int] = set()
    sessions = set(sessions)
    deadline = time.monotonic() + SWEEP_SECONDS
    while time.monotonic() < deadline:
        procs = [p for p in run_processes(mark, sessions, spare) if _alive(p)]
        if not procs:
            break
        for proc in procs:
            try:
                proc.kill()
                killed.add(proc.pid)
            except psutil.Error:
                pass
        psutil.wait_procs(procs, timeout=1)
    return len(killed)


def _alive(proc) -> bool:
    """Whether ``proc`` (psutil) still runs: neither gone nor a zombie."""
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _this_process():
    import psutil

    return psutil.Process()


class Warden:
    """The driver's end: starts the warden process and marks this process's environment, so
    that everything started from here on carries the mark; :meth:`close` at the end of the
    run."""

    def __init__(self) -> None:
        self.mark = uuid.uuid4().hex
        self._previous = os.environ.get(MARK_ENV)
        # not marked itself: the sweep must not kill the warden
        env = {k: v for k, v in os.environ.items() if k != MARK_ENV}
        started = Sessions(set())
        started.look(_this_process())
        before = ",".join(str(sid) for sid in sorted(started.seen))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rollyard.run.warden", self.mark, str(os.getpid()), before],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True, env=env)
        os.environ[MARK_ENV] = self.mark

    def remove_after(self, folder: str | os.PathLike) -> None:
        """Have ``folder`` removed after the sweep, when the driver has died (or ended)."""
        assert self.process.stdin is not None
        self.process.stdin.write(f"{os.fspath(folder)}\n".encode())
        self.process.stdin.flush()

    def close(self, timeout: float = SWEEP_SECONDS + 5) -> None:
        """Let the warden sweep what the run left and end; restore the environment."""
        if self._previous is None:
            os.environ.pop(MARK_ENV, None)
        else:
            os.environ[MARK_ENV] = self._previous
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def main(argv: list[str]) -> int:
    import psutil

    mark, driver = argv[0], psutil.Process(int(argv[1]))
    # never the driver's own session (the user's terminal), this one, nor one from before
    spared = {os.getsid(driver.pid), os.getsid(0)}
    spared |= {int(sid) for sid in argv[2].split(",") if sid} if len(argv) > 2 else set()
    sessions = Sessions(spared)
    stdin, said = sys.stdin.buffer.raw, b""
    while True:
        sessions.look(driver)
        ready, _, _ = select.select([stdin], [], [], POLL_S)
        if not ready:
            continue
        chunk = stdin.read(4096)
        if not chunk:  # end-of-file: the driver closed it, or died
            break
        said += chunk
    try:
        sweep(mark, sessions.still_ours(), spare=frozenset({driver.pid}))
    finally:
        for folder in said.decode().splitlines():
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
