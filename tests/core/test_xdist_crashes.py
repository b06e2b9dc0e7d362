"""The suite's own xdist scheduling (tests/xdist_crashes.py): a worker that dies neither hangs
the run nor fails a test that passes when run again, and a test that always kills its worker
still fails, with the tests after it run. A test frozen in native code, where pytest-timeout's
alarm cannot reach it, becomes such a dead worker through the suite's ``faulthandler_timeout``
settings."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def run_under_xdist(project: Path, test_file: str, ini: str = "") -> subprocess.CompletedProcess:
    """``pytest -n 2 --dist loadfile`` on ``project``: four passing tests in ``test_a.py``, the
    given ``test_b.py``, the suite's scheduler in its conftest and ``ini`` in its pytest.ini."""
    (project / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nfrom xdist_crashes import *\n")
    (project / "pytest.ini").write_text(f"[pytest]\n{ini}")
    (project / "test_a.py").write_text("".join(f"def test_{i}(): pass\n" for i in range(4)))
    (project / "test_b.py").write_text(textwrap.dedent(test_file))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-p",
         "no:cacheprovider", "-rA", str(project)],
        cwd=project, capture_output=True, text=True, timeout=180)


def test_a_crashed_worker_is_replaced_and_its_test_run_once_more(tmp_path: Path) -> None:
    result = run_under_xdist(tmp_path, f"""
        import os, pathlib
        MARK = pathlib.Path({str(tmp_path / "crashed-once")!r})

        def test_before(): pass

        def test_aborts_the_first_time():
            if not MARK.exists():
                MARK.touch()
                os.abort()

        def test_always_aborts(): os.abort()

        def test_after(): pass
        """)
    out = result.stdout
    assert result.returncode == 1, out[-3000:]
    assert "crashed while running 'test_b.py::test_aborts_the_first_time': running it once " \
           "more" in out
    assert "PASSED test_b.py::test_aborts_the_first_time" in out
    assert "FAILED test_b.py::test_always_aborts" in out
    assert "PASSED test_b.py::test_after" in out
    assert "1 failed, 7 passed, 2 rerun" in out, out[-3000:]


def test_a_test_frozen_in_native_code_is_dumped_ended_and_run_once_more(
        tmp_path: Path) -> None:
    import tomllib

    suite = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())
    assert suite["tool"]["pytest"]["ini_options"]["faulthandler_exit_on_timeout"] is True
    result = run_under_xdist(tmp_path, f"""
        import pathlib, signal, time
        MARK = pathlib.Path({str(tmp_path / "froze-once")!r})

        def test_before(): pass

        def test_freezes_the_first_time():
            if not MARK.exists():
                MARK.touch()
                # pytest-timeout's alarm never arrives, as in a thread stuck in C
                signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM}})
                time.sleep(120)

        def test_after(): pass
        """, ini="timeout = 1\nfaulthandler_timeout = 2\nfaulthandler_exit_on_timeout = true\n")
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert "Timeout (0:00:02)!" in result.stderr
    assert "in test_freezes_the_first_time" in result.stderr
    assert "crashed while running 'test_b.py::test_freezes_the_first_time': running it " \
           "once more" in out
    assert "7 passed, 1 rerun" in out, out[-3000:]
