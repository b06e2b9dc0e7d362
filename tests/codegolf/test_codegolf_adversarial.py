"""The adversarial suite: hostile programs are contained and score 0 with a reason.

Each program carries MARKER in its text (the sandbox passes the program on the command line,
so any process it leaves behind shows MARKER in /proc/PID/cmdline). After the suite: no live
process with the marker, no file outside the sandbox's own temporary directories, and an
honest program still scores full marks.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import platform
import socket
import threading
import time

import pytest
from rollyard_codegolf.scoring import score_program

MARKER = "codegolf-adversarial-7f3c"
PROJECT = pathlib.Path(__file__).resolve().parents[2]
SECRET = "parent-secret-5d1e"
PWNED = f"pwned-{MARKER}"


def hostile(body: str) -> str:
    return f"# {MARKER}\n{body}\n"


def live_marked_processes() -> list[int]:
    """Pids of processes (not zombies) whose command line mentions MARKER."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if MARKER.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def outside_paths() -> list[pathlib.Path]:
    return [pathlib.Path("/tmp") / PWNED, pathlib.Path.home() / PWNED, PROJECT / PWNED,
            pathlib.Path(__file__).parent / PWNED]


@pytest.fixture(scope="module")
def loopback_server():
    """A real TCP server on the host's loopback; records every connection it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    accepted: list[object] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(conn.getpeername())
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


def _programs(port: int) -> dict[str, tuple[str, set[str]]]:
    """name -> (program, reasons it may score 0 for). Every program is run on add-two."""
    writes = "\n".join(f"try:\n open({str(p)!r}, 'w').write('x')\nexcept OSError: pass"
                       for p in outside_paths())
    return {
        "infinite loop": (hostile("while True: pass"), {"cpu_limit", "timeout"}),
        "sleeping forever": (hostile("import time\nwhile True: time.sleep(0.1)"), {"timeout"}),
        "fork bomb": (hostile("import os\nwhile True:\n    os.fork()"),
                      {"runtime_error", "timeout", "cpu_limit"}),
        "allocate 10 GB": (hostile("x = bytearray(10 * 1024**3)\nprint(len(x))"),
                           {"memory_limit"}),
        "1 GB to stdout": (hostile("import sys\nfor _ in range(1024):\n"
                                   "    sys.stdout.write('7' * 1024**2)"), {"output_limit"}),
        "write outside the temp dir": (hostile(writes + "\nprint('done')"), {"wrong_answer"}),
        "write the project tree": (hostile(f"open({str(PROJECT / PWNED)!r}, 'w')"),
                                   {"runtime_error"}),
        "read the project tree": (hostile(f"print(open({str(PROJECT / 'pyproject.toml')!r})"
                                          ".read())"), {"runtime_error"}),
        "read /etc/shadow": (hostile("print(open('/etc/shadow').read())"), {"runtime_error"}),
        "read ~/.ssh": (hostile(f"import os\nprint(os.listdir({str(pathlib.Path.home())!r}"
                                " + '/.ssh'))"), {"runtime_error"}),
        "parent environment": (hostile(
            "import os, glob\nprint(dict(os.environ))\nfor p in glob.glob('/proc/*/environ'):\n"
            "    try: print(open(p).read())\n    except OSError: pass"), {"wrong_answer"}),
        "socket to loopback": (hostile(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)"),
            {"runtime_error"}),
        "socket to an external address": (hostile(
            "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)"),
            {"runtime_error"}),
        "background process": (hostile(
            "import subprocess, sys\n"
            f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)  # {MARKER}'],"
            " start_new_session=True)\nprint('left a child')"), {"wrong_answer"}),
        "double-forked daemon": (hostile(
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            "        time.sleep(30)\n    os._exit(0)\nprint('daemonised')"), {"wrong_answer"}),
        "kill the parent": (hostile(
            f"import os, signal\nfor pid in (os.getppid(), 1, {os.getpid()}, {os.getppid()}):\n"
            "    try: os.kill(pid, signal.SIGKILL)\n    except OSError: pass\n"
            "raise SystemExit(1)"), {"runtime_error"}),
        "ctypes crash": (hostile("import ctypes\nctypes.string_at(0)"), {"crashed"}),
        "nested user namespace": (hostile(
            "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "assert libc.unshare(0x10000000) == 0, 'unshare refused'\nprint(5)"),
            {"runtime_error"}),
        "answers only the shown case": (hostile("print(5)"), {"wrong_answer"}),
    }


@pytest.mark.slow
def test_hostile_programs_are_contained_and_score_zero(tasks, strict_sandbox, loopback_server,
                                                       monkeypatch):
    port, accepted = loopback_server
    monkeypatch.setenv("CODEGOLF_TEST_SECRET", SECRET)
    task = dataclasses.replace(tasks["add-two"], tests=tasks["add-two"].tests[:2])  # 1 hidden
    failures = {}
    for name, (program, reasons) in _programs(port).items():
        started = time.monotonic()
        score = score_program(program, task, strict_sandbox)
        elapsed = time.monotonic() - started
        if score.passed != 0 or score.reason not in reasons:
            failures[name] = (score.passed, score.reason, score.detail[-200:])
        assert elapsed < 10, f"{name} took {elapsed:.1f}s"
        if name.startswith(("read", "parent")):
            leaked = strict_sandbox.run(program).stdout
            assert SECRET not in leaked and "[project]" not in leaked and "root:" not in leaked
    assert failures == {}
    assert accepted == []
    # no stray process, no file outside the sandbox's temporary directories
    deadline = time.monotonic() + 5
    while live_marked_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_marked_processes() == []
    assert [p for p in outside_paths() if p.exists()] == []
    # and the run continues: an honest program still passes everything
    honest = score_program(task.reference, task, strict_sandbox)
    assert honest.all_passed and honest.reason is None


def test_the_process_limit_holds_even_when_the_host_runs_as_root(strict_sandbox):
    program = hostile(
        "import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
        "            time.sleep(5)\n            os._exit(0)\n        n += 1\n"
        "except OSError as exc:\n    print(n, exc.errno)")
    result = strict_sandbox.run(program)
    forked, errno = map(int, result.stdout.split())
    assert forked < strict_sandbox.limits.processes and errno == 11  # EAGAIN from RLIMIT_NPROC


def test_descriptors_inherited_from_the_host_are_closed(strict_sandbox, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    fd = os.open(secret, os.O_RDONLY)
    try:
        os.dup2(fd, 50, inheritable=True)  # as a careless library in the host process might
        result = strict_sandbox.run(hostile("import os\nprint(os.read(50, 100))"))
    finally:
        os.close(50)
        os.close(fd)
    assert SECRET not in result.stdout and "Bad file descriptor" in result.stderr


def test_kernel_attack_surface_is_closed_by_seccomp(strict_sandbox):
    calls = {"ptrace": 101, "io_uring_setup": 425, "bpf": 321, "keyctl": 250,
             "perf_event_open": 298, "unshare": 272, "mount": 165}
    probe = hostile(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"for name, nr in {calls!r}.items():\n"
        "    ctypes.set_errno(0)\n"
        "    print(name, libc.syscall(nr, 0, 0, 0, 0, 0), ctypes.get_errno())")
    if platform.machine() != "x86_64":
        pytest.skip("the probe uses x86_64 system call numbers")
    lines = strict_sandbox.run(probe).stdout.split("\n")[:-1]
    assert lines == [f"{name} -1 1" for name in calls]  # every one refused with EPERM


def test_seccomp_filter_shape():
    from rollyard_codegolf.seccomp import DENIED, deny_filter

    assert deny_filter("sparc") is None
    for machine in ("x86_64", "aarch64"):
        program = deny_filter(machine)
        # arch check (3) + load nr (1) + x32 guard on x86_64 (2) + one test per call + 2 rets
        extra = 2 if machine == "x86_64" else 0
        assert len(program) == 8 * (4 + extra + len(DENIED) + 2)
