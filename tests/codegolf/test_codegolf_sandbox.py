"""The sandbox's ordinary behaviour: I/O, exit status, limits, and refusing to run unisolated."""

import json
import os

import pytest
from rollyard_codegolf.sandbox import (
    MAX_PROGRAM_BYTES,
    Sandbox,
    SandboxLimits,
    SandboxUnavailable,
)
from rollyard_codegolf.scoring import failure_reason, normalise_output


def test_reads_stdin_and_reports_exit_status_and_times(sandbox):
    result = sandbox.run("import sys\nprint(input()[::-1])\nsys.exit(3)", "abc\n")
    assert (result.stdout, result.exit_status, result.limit) == ("cba\n", 3, None)
    assert result.sandboxed and 0 < result.wall_s < sandbox.limits.wall_s and result.cpu_s >= 0
    assert json.loads(json.dumps(result.as_dict()))["stdout"] == "cba\n"


def test_large_stdin_is_fed_without_deadlock(sandbox):
    data = "x" * 1_000_000 + "\n"
    result = sandbox.run("import sys\nprint(len(sys.stdin.read()))", data)
    assert result.stdout == "1000001\n" and result.ok


def test_runs_as_nobody_in_an_empty_environment_inside_a_fresh_tmp(sandbox):
    code = ("import os\nopen('f','w').write('x')\n"
            "print(os.getuid(), os.getcwd(), sorted(os.environ), os.listdir('.'), os.getpid())")
    out = sandbox.run(code).stdout.split(" ", 2)
    assert out[:2] == ["65534", "/tmp"]
    assert out[2].startswith("['HOME', 'LC_CTYPE', 'PWD'] ['f'] ")  # no file of an earlier run
    assert int(out[2].rsplit(" ", 1)[1]) < 10  # its own PID namespace


def test_stderr_is_captured_and_a_syntax_error_is_named(sandbox):
    result = sandbox.run("print(")
    assert result.exit_status == 1 and "SyntaxError" in result.stderr
    assert failure_reason(result, "") == "syntax_error"


def test_a_program_with_a_nul_byte_is_a_syntax_error_not_a_crash(sandbox):
    result = sandbox.run("print(1)\0")
    assert failure_reason(result, "1\n") == "syntax_error"


def test_oversized_programs_are_not_run(sandbox):
    result = sandbox.run("#" * (MAX_PROGRAM_BYTES + 1))
    assert result.limit == "program_size" and result.wall_s == 0.0


def test_output_is_compared_after_trailing_whitespace_is_normalised():
    assert normalise_output("1 2 \n3\t\n\n\n") == normalise_output("1 2\n3") == "1 2\n3"
    assert normalise_output(" 1") != normalise_output("1")


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="wall_s"):
        SandboxLimits(wall_s=0)


def test_refuses_to_run_without_bubblewrap_unless_told(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no bwrap to be found
    with pytest.raises(SandboxUnavailable, match="--codegolf-unsafe-no-sandbox"):
        Sandbox(SandboxLimits(wall_s=2))
    unsafe = Sandbox(SandboxLimits(wall_s=2), unsafe_no_sandbox=True)
    result = unsafe.run(f"import os\nprint(input(), os.getcwd() != {os.getcwd()!r})", "hi\n")
    assert result.stdout == "hi True\n" and not result.sandboxed


def test_unsafe_mode_still_enforces_the_wall_clock(monkeypatch, tmp_path):
    unsafe = Sandbox(SandboxLimits(wall_s=1, cpu_s=5), unsafe_no_sandbox=True)
    result = unsafe.run("import time\nwhile 1: time.sleep(0.1)")
    assert result.limit == "wall" and result.wall_s < 3


def test_a_sandbox_bubblewrap_cannot_set_up_is_an_error_not_a_failing_program(monkeypatch):
    from rollyard_codegolf import sandbox as sandbox_module

    box = Sandbox(SandboxLimits(wall_s=2))
    assert box.run("print(1)").started
    # a device node that does not exist: bubblewrap fails before the interpreter starts
    monkeypatch.setattr(sandbox_module, "DEVICES", ("/dev/null", "/dev/no-such-device"))
    with pytest.raises(SandboxUnavailable, match="could not set up a sandbox 2 times"):
        box.run("print(1)")


def test_a_machine_that_cannot_sandbox_is_refused_at_construction(monkeypatch):
    from rollyard_codegolf import sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module, "DEVICES", ("/dev/no-such-device",))
    with pytest.raises(SandboxUnavailable, match=r"cannot start a sandbox here.*"
                                                 r"--codegolf-unsafe-no-sandbox"):
        Sandbox(SandboxLimits(wall_s=2))
