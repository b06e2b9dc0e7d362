"""The suite's own xdist scheduling (tests/xdist_crashes.py): a worker that dies neither hangs
the run nor fails a test that passes when run again, and a test that always kills its worker
still fails, with the tests after it run."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_a_crashed_worker_is_replaced_and_its_test_run_once_more(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nfrom xdist_crashes import *\n")
    (tmp_path / "test_a.py").write_text("".join(f"def test_{i}(): pass\n" for i in range(4)))
    (tmp_path / "test_b.py").write_text(textwrap.dedent(f"""
        import os, pathlib
        MARK = pathlib.Path({str(tmp_path / "crashed-once")!r})

        def test_before(): pass

        def test_aborts_the_first_time():
            if not MARK.exists():
                MARK.touch()
                os.abort()

        def test_always_aborts(): os.abort()

        def test_after(): pass
        """))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-p",
         "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=180)
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
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
        "from xdist_crashes import *\nfrom frozen_tests import *\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nfreeze_grace = 1\n")
    (tmp_path / "test_a.py").write_text("".join(f"def test_{i}(): pass\n" for i in range(4)))
    (tmp_path / "test_f.py").write_text(textwrap.dedent(f"""
        import pathlib, signal, time
        import pytest
        MARK = pathlib.Path({str(tmp_path / "froze-once")!r})

        def test_before(): pass

        @pytest.mark.timeout(1)
        def test_freezes_the_first_time():
            if not MARK.exists():
                MARK.touch()
                # pytest-timeout's alarm never arrives, as in a thread stuck in C
                signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGALRM}})
                time.sleep(120)

        def test_after(): pass
        """))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadfile", "-p",
         "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=100)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert "Timeout (0:00:02)!" in result.stderr
    assert "in test_freezes_the_first_time" in result.stderr
    assert "crashed while running 'test_f.py::test_freezes_the_first_time': running it " \
           "once more" in out
    assert "7 passed, 1 rerun" in out, out[-3000:]
