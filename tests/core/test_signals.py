"""SIGINT and SIGTERM during a run: the first asks for a stop after the step in progress, a
second stops at once, killing every process the run started (the whole-run behaviour, with a
checkpoint and exit status 143, is in tests/e2e/test_checkpoint_resume.py)."""

import signal
import subprocess
import sys
import textwrap

import psutil
import pytest
from rollyard.run.signals import RunStopped, StopSignals

SCRIPT = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    from rollyard.run.signals import StopSignals

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(child.pid, flush=True)
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIG{first})
        time.sleep(0.2)
        print("requested", stop.requested, stop.signum, flush=True)
        os.kill(os.getpid(), signal.SIG{second})
        time.sleep(5)
    print("not reached", flush=True)
""")


@pytest.mark.parametrize("first, second, status", [("INT", "INT", 130), ("TERM", "INT", 130),
                                                    ("INT", "TERM", 143)])
def test_a_second_signal_stops_at_once_and_kills_what_the_run_started(first, second, status):
    result = subprocess.run([sys.executable, "-c", SCRIPT.format(first=first, second=second)],
                            capture_output=True, text=True, timeout=60)
    child, requested = result.stdout.splitlines()
    assert requested == f"requested True {getattr(signal, 'SIG' + first).value}"
    assert result.returncode == status
    assert "stopping after the current step and saving a checkpoint" in result.stderr
    assert f"SIG{second} received again: stopping now, without saving" in result.stderr
    assert not psutil.pid_exists(int(child)) or \
        psutil.Process(int(child)).status() == psutil.STATUS_ZOMBIE


def test_handlers_are_restored_after_the_run():
    before = signal.getsignal(signal.SIGTERM)
    with StopSignals() as stop:
        assert signal.getsignal(signal.SIGTERM) == stop._handle
        stop.install()  # again, over a handler something else set meanwhile
    assert signal.getsignal(signal.SIGTERM) == before


def test_the_stop_message_says_where_the_checkpoint_is(tmp_path):
    stopped = RunStopped(signal.SIGTERM, 4, tmp_path / "checkpoints" / "step-000004", tmp_path)
    assert stopped.exit_code == 143
    assert str(stopped) == (f"stopped by SIGTERM after step 4; checkpoint {tmp_path}/checkpoints"
                            f"/step-000004 (continue with: rollyard train --resume {tmp_path})")
    early = RunStopped(signal.SIGINT, 0, None, tmp_path)
    assert early.exit_code == 130
    assert str(early) == "stopped by SIGINT after step 0; no checkpoint was saved (no step had " \
                         "finished)"
