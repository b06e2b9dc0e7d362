"""Engine server subprocesses: start in their own process group, wait for health, stop.

Shared by every engine launcher (embedded and SGLang). A server that exits or stays unhealthy
raises :class:`rollyard.EngineStartError` quoting the last lines of its log.
"""

from __future__ import annotations

import atexit
import os
import pathlib
import random
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence

from rollyard import EngineHandle, EngineStartError

LOG_TAIL_LINES = 30


EPHEMERAL_RANGE_FILE = pathlib.Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Where :func:`free_port` starts looking: above Ray's default worker ports (10002-19999),
#: which Ray's workers bind while a run goes on.
LOWEST_SERVER_PORT = 20000
_PORT_CHOICE = random.SystemRandom()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, between Ray's worker ports and the kernel's
    ephemeral range if there is room.

    A server that dies is relaunched on its port (the run's URLs do not change). A port from
    the ephemeral range could meanwhile become the local end of anybody's outgoing
    connection, and one of Ray's worker ports a new Ray worker's; a port between the two is
    only taken by an explicit ``bind``.
    """
    candidates = range(LOWEST_SERVER_PORT, _ephemeral_start())
    # Not the module's generator: a run seeds it, and two seeded runs would race for one port.
    for port in _PORT_CHOICE.sample(candidates, min(64, len(candidates))):
        if _bindable(host, port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _ephemeral_start() -> int:
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return LOWEST_SERVER_PORT  # unknown: let the kernel choose


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def log_tail(path: pathlib.Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file ('' if it does not exist)."""
    try:
        text = path.read_bytes()[-64 * 1024:].decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ProcessEngineHandle(EngineHandle):
    """A server subprocess leading its own process group; ``stop`` ends the whole group."""

    def __init__(self, process: subprocess.Popen, url: str, log_path: pathlib.Path) -> None:
        self.process = process
        self.url = url
        self.log_path = log_path
        atexit.register(self.stop)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``timeout`` seconds. Idempotent."""
        atexit.unregister(self.stop)
        if self.process.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.process.wait(timeout)
        self._signal(signal.SIGKILL)  # children the server left behind

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def launch_server(command: Sequence[str], url: str, *, name: str, timeout: float,
                  log_dir: str | None = None, env: Mapping[str, str] | None = None,
                  health_path: str = "/health") -> ProcessEngineHandle:
    """Start ``command`` and return its handle once ``url + health_path`` answers 200.

    Raises EngineStartError, quoting the server's last log lines, if it exits first or is not
    healthy within ``timeout`` seconds (the process group is stopped then).
    """
    folder = pathlib.Path(log_dir or tempfile.mkdtemp(prefix=f"rollyard-{name}-"))
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / f"{name}-{url.rsplit(':', 1)[-1]}.log"
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(list(command), stdout=log_file, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   env=None if env is None else dict(env))
    handle = ProcessEngineHandle(process, url, log_path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not handle.alive:
            handle.stop()
            raise EngineStartError(
                f"{name} engine exited with status {process.returncode} before it became "
                f"healthy at {url} (command: {' '.join(command)}; log {log_path}). "
                f"Last log lines:\n{log_tail(log_path)}")
        if _healthy(url + health_path):
            return handle
        time.sleep(0.25)
    handle.stop()
    raise EngineStartError(
        f"{name} engine did not become healthy at {url} within {timeout:.0f} s (log "
        f"{log_path}). Last log lines:\n{log_tail(log_path)}")
