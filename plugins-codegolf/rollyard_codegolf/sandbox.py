"""Run untrusted Python programs under bubblewrap, with rlimits, a wall clock and output caps.

Each run gets its own user, PID, network, IPC and UTS namespaces (no network at all), a fresh
size-capped tmpfs at ``/tmp`` as its only writable place and working directory, read-only
system paths and interpreter, four device nodes and no ``/proc``, an empty environment and a
new session. The interpreter sets hard rlimits on itself (CPU seconds, address space,
processes, file size, open files) before the program's first line runs. A wall-clock timeout
or an output past the cap kills the sandbox's PID namespace, which takes every process the
program started with it.

System calls that code golf never needs (ptrace, bpf, io_uring, keyrings, mounts, namespaces
…) fail with EPERM under a seccomp filter (see :mod:`rollyard_codegolf.seccomp`).

This module depends only on that one and can be reused by other plugins.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

from rollyard_codegolf.seccomp import deny_filter

#: The program is passed as an argument; the kernel caps one argument at 128 KiB.
MAX_PROGRAM_BYTES = 100_000
#: Paths that are bound read-only (or recreated as symlinks) when they exist.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64")
#: The only device nodes inside (no /proc, no ptys): each is one cheap bind mount.
DEVICES = ("/dev/null", "/dev/zero", "/dev/random", "/dev/urandom")
SANDBOX_UID = 65534
#: How long a killed sandbox may take to tear its PID namespace down before the fallback.
KILL_GRACE_S = 3.0
#: Tries before a sandbox that bubblewrap cannot set up is reported as an error.
SETUP_ATTEMPTS = 2
#: How long output pipes may stay open after the program exited before leftovers are killed.
OUTPUT_GRACE_S = 0.2

# Run by the interpreter inside the sandbox before the program: set hard rlimits on this
# process, close every inherited descriptor past 3 (bubblewrap's info fd, and any descriptor
# a library in the host process left inheritable), write "+" on fd 3 (it started) and
# arrange to report its CPU time there at exit, then
# run the program (its first command-line argument) as ``__main__``. Formatted with
# (resource, soft, hard) triples.
_PRELUDE = """\
import atexit as _a, os as _o, resource as _r, sys as _s
for _k, _v, _h in {limits}:
    _r.setrlimit(_k, (_v, _h))
_o.closerange(4, 1 << 20)
_o.write(3, b"+")
def _cpu(g=_r.getrusage, w=_o.write):
    w(3, repr(sum(u.ru_utime + u.ru_stime for u in (g(0), g(-1)))).encode())
_a.register(_cpu)
_c = _s.argv.pop(1)
_s.argv[0] = "main.py"
del _a, _o, _r, _s, _k, _v, _h, _cpu
exec(compile(_c, "main.py", "exec"), {{"__name__": "__main__", "__builtins__": __builtins__}})
"""


class SandboxUnavailable(RuntimeError):
    """Bubblewrap cannot run here and running without it was not explicitly allowed."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one program run."""

    wall_s: float = 4.0
    cpu_s: int = 2
    memory_bytes: int = 256 * 1024**2
    processes: int = 8
    file_bytes: int = 8 * 1024**2
    open_files: int = 64
    output_bytes: int = 64 * 1024
    tmp_bytes: int = 16 * 1024**2

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {value!r}")


@dataclass
class ExecResult:
    """What one run did. ``exit_status`` is the exit code, or minus the signal that killed it.
    ``limit`` names the limit that stopped the program (wall, cpu, output, memory) or is None.
    """

    exit_status: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float
    limit: str | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    sandboxed: bool = True
    started: bool = True

    @property
    def ok(self) -> bool:
        return self.exit_status == 0 and self.limit is None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bubblewrap_path() -> str | None:
    """The ``bwrap`` executable, or None when it is not installed."""
    return shutil.which("bwrap")


def _start_report(fd: int) -> tuple[bool, float]:
    """Whether the interpreter started (it writes "+" first) and the CPU seconds it reported
    at exit (0.0 when it could not: killed, or the program closed the descriptor). Reads
    without blocking, then closes ``fd``."""
    try:
        os.set_blocking(fd, False)
        raw = os.read(fd, 64)
    except OSError:
        raw = b""
    finally:
        os.close(fd)
    try:
        cpu = max(0.0, float(raw[1:].decode("ascii")))
    except ValueError:
        cpu = 0.0
    return raw.startswith(b"+"), cpu


def _child_pid(info_r: int, bwrap_pid: int) -> int | None:
    """The sandbox init's pid from bubblewrap's ``--info-fd`` JSON, if it has been written and
    that process is still bubblewrap's child (so no other process can ever be signalled)."""
    try:
        os.set_blocking(info_r, False)
        info, _ = json.JSONDecoder().raw_decode(os.read(info_r, 4096).decode())
        child = int(info["child-pid"])
        with open(f"/proc/{child}/stat") as stat:
            parent = int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return child if parent == bwrap_pid else None


def _reachable_by_others(path: str) -> bool:
    """Whether a user with no special rights may execute ``path`` (every folder on the way
    searchable, the file readable and executable by others)."""
    try:
        if os.stat(path).st_mode & 0o005 != 0o005:
            return False
        folder = os.path.dirname(path)
        while folder != os.path.dirname(folder):
            if not os.stat(folder).st_mode & 0o001:
                return False
            folder = os.path.dirname(folder)
    except OSError:
        return False
    return True


def _setup_failed(result: ExecResult) -> bool:
    """Whether bubblewrap failed before the interpreter started (and said so)."""
    return not result.started and result.limit is None and result.stderr.startswith("bwrap: ")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


class Sandbox:
    """Runs one Python program at a time per call; thread-safe, so callers may run several
    concurrently from a thread pool.

    ``python`` is the interpreter used inside (default: the base interpreter of this process,
    or the system ``python3`` when this process is root and the sandbox user cannot reach
    it; its installation prefix is bound read-only). Without bubblewrap, construction raises
    :class:`SandboxUnavailable` unless ``unsafe_no_sandbox`` is true, in which case programs run
    as plain subprocesses with the same rlimits, timeout and output cap but no isolation.
    """

    def __init__(self, limits: SandboxLimits | None = None, unsafe_no_sandbox: bool = False,
                 python: str | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.unsafe = unsafe_no_sandbox
        self.python = os.path.realpath(python or getattr(sys, "_base_executable", sys.executable))
        self._launcher: list[str] = []
        if not unsafe_no_sandbox:
            self._launcher = self._find_launcher()
            if os.geteuid() == 0:
                self.python = self._python_for_nobody(python)
        self._prelude = _PRELUDE.format(limits=self._rlimits())
        self._seccomp = None if unsafe_no_sandbox else deny_filter()
        if not unsafe_no_sandbox:
            self._check_bubblewrap()

    @staticmethod
    def _find_launcher() -> list[str]:
        """``bwrap``, behind ``setpriv`` to the unprivileged SANDBOX_UID when this process is
        root: a sandbox whose user is root outside its namespace would escape RLIMIT_NPROC."""
        bwrap = bubblewrap_path()
        if bwrap is None:
            raise SandboxUnavailable(
                "bubblewrap ('bwrap') is not installed, so programs cannot be sandboxed; "
                "install the Debian package 'bubblewrap' or pass "
                "--codegolf-unsafe-no-sandbox to run them unisolated")
        if os.geteuid() != 0:
            return [bwrap]
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise SandboxUnavailable(
                "running as root, the sandbox drops to an unprivileged user with 'setpriv' "
                "(Debian package util-linux), which is not installed; install it or pass "
                "--codegolf-unsafe-no-sandbox to run programs unisolated")
        return [setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}",
                "--clear-groups", "--", bwrap]

    def _python_for_nobody(self, requested: str | None) -> str:
        """The interpreter, if SANDBOX_UID can reach it; otherwise (only when none was
        requested) the system's ``python3``."""
        if _reachable_by_others(self.python):
            return self.python
        fallback = None if requested else shutil.which("python3", path="/usr/bin:/bin")
        if fallback and _reachable_by_others(os.path.realpath(fallback)):
            return os.path.realpath(fallback)
        raise SandboxUnavailable(
            f"the interpreter {self.python!r} is not readable by the unprivileged sandbox user "
            "and there is no system python3; pass --codegolf-python PATH")

    def _rlimits(self) -> str:
        import resource

        lim = self.limits
        # CPU: SIGXCPU at the soft limit, SIGKILL one second later if it is caught.
        triples = [(resource.RLIMIT_CPU, lim.cpu_s, lim.cpu_s + 1),
                   (resource.RLIMIT_AS, lim.memory_bytes, lim.memory_bytes),
                   (resource.RLIMIT_NPROC, lim.processes, lim.processes),
                   (resource.RLIMIT_FSIZE, lim.file_bytes, lim.file_bytes),
                   (resource.RLIMIT_NOFILE, lim.open_files, lim.open_files),
                   (resource.RLIMIT_CORE, 0, 0)]
        return repr(tuple((int(k), int(v), int(h)) for k, v, h in triples))

    def _check_bubblewrap(self) -> None:
        """Run an empty program once, so a machine that cannot sandbox is refused up front."""
        try:
            probe = self.run("", "")
            problem = (None if probe.exit_status == 0 else
                       f"exit status {probe.exit_status}: {probe.stderr.strip()[-300:]}")
        except SandboxUnavailable as exc:
            problem = str(exc)
        if problem is not None:
            raise SandboxUnavailable(
                f"bubblewrap is installed but cannot start a sandbox here ({problem}); enable "
                "unprivileged user namespaces or pass --codegolf-unsafe-no-sandbox to run "
                "programs unisolated")

    # ------------------------------------------------------------------ command line

    def _interpreter_argv(self, chdir: str | None = None) -> list[str]:
        prelude = self._prelude if chdir is None else (
            f"import os as _o; _o.chdir({chdir!r}); del _o\n" + self._prelude)
        return [self.python, "-I", "-S", "-c", prelude]

    def _bwrap_argv(self) -> list[str]:
        argv = [*self._launcher, "--unshare-all", "--unshare-user", "--disable-userns",
                "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
                "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
                "--info-fd", "4"]
        if self._seccomp is not None:
            argv += ["--seccomp", "5"]
        for path in SYSTEM_PATHS:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        prefix = os.path.dirname(os.path.dirname(self.python))
        if not any(prefix == p or prefix.startswith(p + "/") for p in SYSTEM_PATHS):
            argv += ["--ro-bind", prefix, prefix]
        for device in DEVICES:
            argv += ["--dev-bind", device, device]
        argv += ["--size", str(self.limits.tmp_bytes), "--tmpfs", "/tmp",
                 "--chdir", "/tmp", "--setenv", "HOME", "/tmp", "--"]
        return argv + self._interpreter_argv()

    # ------------------------------------------------------------------ running

    def run(self, code: str, stdin: str = "") -> ExecResult:
        """Run ``code`` with ``stdin`` and return what happened; never raises for anything the
        program does. A program over MAX_PROGRAM_BYTES is not run (limit ``program_size``),
        nor is one with a NUL character (reported as a syntax error, as Python would).

        When bubblewrap itself fails to set the sandbox up (a transient lack of kernel
        resources), the run is retried; after SETUP_ATTEMPTS failures SandboxUnavailable is
        raised, so an infrastructure fault is never scored as the program's."""
        if len(code.encode("utf-8", errors="replace")) > MAX_PROGRAM_BYTES:
            return ExecResult(-1, "", f"program is over {MAX_PROGRAM_BYTES} bytes", 0.0, 0.0,
                              limit="program_size", sandboxed=not self.unsafe, started=False)
        if "\0" in code:  # not Python source, and it cannot be passed as an argument
            return ExecResult(1, "", "SyntaxError: source code cannot contain null bytes "
                              "(not run)\n", 0.0, 0.0, sandboxed=not self.unsafe, started=False)
        if self.unsafe:
            with tempfile.TemporaryDirectory(prefix="rollyard-codegolf-") as cwd:
                return self._spawn([*self._interpreter_argv(cwd), code], stdin, {"HOME": cwd})
        for _ in range(SETUP_ATTEMPTS):
            result = self._spawn([*self._bwrap_argv(), code], stdin, {})
            if not _setup_failed(result):
                return result
        raise SandboxUnavailable(f"bubblewrap could not set up a sandbox {SETUP_ATTEMPTS} "
                                 f"times in a row: {result.stderr.strip()[-300:]}")

    def _spawn(self, argv: list[str], stdin: str, env: dict[str, str]) -> ExecResult:
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        cpu_r, cpu_w = os.pipe()
        info_r, info_w = os.pipe()
        filter_r, filter_w = os.pipe()
        os.write(filter_w, self._seccomp or b"")  # a few hundred bytes: fits the pipe buffer
        os.close(filter_w)
        actions = [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                   (os.POSIX_SPAWN_DUP2, err_w, 2), (os.POSIX_SPAWN_DUP2, cpu_w, 3),
                   (os.POSIX_SPAWN_DUP2, info_w, 4), (os.POSIX_SPAWN_DUP2, filter_r, 5)]
        start = time.monotonic()
        try:
            pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
        finally:
            for fd in (in_r, out_w, err_w, cpu_w, info_w, filter_r):
                os.close(fd)
        pidfd = os.pidfd_open(pid)
        try:
            streams, limit, finished = self._pump(pidfd, in_w, out_r, err_r, stdin.encode(),
                                                  start + self.limits.wall_s)
            if not finished:  # out of time or output, or something still holds the pipes
                self._kill(pid, pidfd, info_r)
        finally:
            os.close(pidfd)
            os.close(info_r)
        _, status, usage = os.wait4(pid, 0)
        wall = time.monotonic() - start
        started, reported = _start_report(cpu_r)
        cpu = max(usage.ru_utime + usage.ru_stime, reported)
        exit_status = self._exit_status(status)
        (out, out_cut), (err, err_cut) = streams
        if limit is None:
            limit = self._limit_from(exit_status, err)
        return ExecResult(exit_status, _decode(out), _decode(err), round(wall, 4), round(cpu, 4),
                          limit, out_cut, err_cut, sandboxed=not self.unsafe, started=started)

    def _pump(self, pidfd: int, in_w: int, out_r: int, err_r: int, data: bytes,
              deadline: float) -> tuple[tuple[tuple[bytes, bool], tuple[bytes, bool]],
                                        str | None, bool]:
        """Feed stdin and collect capped stdout/stderr until the process has exited and both
        pipes are closed (``finished``), the wall clock runs out (limit ``wall``) or stdout
        passes the cap (``output``). Pipes still open OUTPUT_GRACE_S after the exit (a
        leftover process holds them) end it unfinished. Closes the three pipe ends."""
        cap = self.limits.output_bytes
        buffers = {out_r: bytearray(), err_r: bytearray()}
        cut = {out_r: False, err_r: False}
        limit = None
        pending = memoryview(data)
        open_fds = {in_w, out_r, err_r}
        exited_at: float | None = None
        sel = selectors.DefaultSelector()
        try:
            sel.register(pidfd, selectors.EVENT_READ)
            sel.register(out_r, selectors.EVENT_READ)
            sel.register(err_r, selectors.EVENT_READ)
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE)
            while limit is None:
                outputs_open = out_r in open_fds or err_r in open_fds
                if exited_at is not None and not outputs_open:
                    break
                end = deadline if exited_at is None else min(deadline,
                                                             exited_at + OUTPUT_GRACE_S)
                remaining = end - time.monotonic()
                if remaining <= 0:
                    limit = "wall" if exited_at is None else None
                    break
                for key, _ in sel.select(remaining):
                    fd = key.fd
                    if fd == pidfd:
                        exited_at = time.monotonic()
                        sel.unregister(fd)
                    elif fd == in_w:
                        try:
                            pending = pending[os.write(fd, pending[:65536]):]
                        except OSError:  # the program closed stdin or exited
                            pending = pending[:0]
                        if not pending:
                            sel.unregister(fd)
                            os.close(fd)
                            open_fds.discard(fd)
                    else:
                        chunk = os.read(fd, 65536)
                        if not chunk:
                            sel.unregister(fd)
                            os.close(fd)
                            open_fds.discard(fd)
                            continue
                        room = cap - len(buffers[fd])
                        buffers[fd] += chunk[:room]
                        if len(chunk) > room:
                            cut[fd] = True
                            if fd == out_r:
                                limit = "output"
        finally:
            sel.close()
            finished = exited_at is not None and limit is None and \
                out_r not in open_fds and err_r not in open_fds
            for fd in open_fds:
                os.close(fd)
        streams = (bytes(buffers[out_r]), cut[out_r]), (bytes(buffers[err_r]), cut[err_r])
        return streams, limit, finished

    def _kill(self, pid: int, pidfd: int, info_r: int) -> None:
        """Kill the program and everything it started. Sandboxed: SIGKILL the PID namespace's
        init and its process group (bubblewrap reports the init's pid on the info fd), which
        takes the whole namespace down and lets bubblewrap exit and be reaped normally; if that
        pid is not known yet, or bubblewrap lingers, SIGKILL bubblewrap's process group."""
        child = None if self.unsafe else _child_pid(info_r, pid)
        if child is not None:
            for kill in (os.killpg, os.kill):
                try:
                    kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if select.select([pidfd], [], [], KILL_GRACE_S)[0]:
                return
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _exit_status(self, status: int) -> int:
        if os.WIFSIGNALED(status):
            return -os.WTERMSIG(status)
        code = os.WEXITSTATUS(status)
        if not self.unsafe and code > 128:  # bwrap reports a signalled child as 128 + signal
            return -(code - 128)
        return code

    @staticmethod
    def _limit_from(exit_status: int, stderr: bytes) -> str | None:
        if exit_status == -signal.SIGXCPU:
            return "cpu"
        if exit_status != 0 and b"MemoryError" in stderr[-2000:]:
            return "memory"
        return None
