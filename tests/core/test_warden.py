"""The warden: when the driver dies, however it dies, what the run started goes with it — the
processes in the sessions it started or carrying the run's mark, and their children that
cleared their environment (a sandbox) — and nothing else; at a normal end the driver's
environment is restored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
from rollyard.run.warden import MARK_ENV, Warden

DRIVER = textwrap.dedent("""
    import subprocess, sys, tempfile, time
    from rollyard.run.warden import Warden

    # started before the run, in a session of its own: not the run's (an in-process test's
    # fixture)
    before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                              start_new_session=True)
    warden = Warden()
    folder = tempfile.mkdtemp(prefix="rollyard-warden-test-")
    warden.remove_after(folder)  # a Ray cluster's sockets and logs
    # an engine in a session of its own, which starts a child with an empty environment
    engine = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; "
         "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], env={}); "
         "time.sleep(120)"], start_new_session=True)
    time.sleep(1.0)
    print(before.pid, engine.pid, folder, flush=True)
    time.sleep(120)
""")


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_killed_driver_takes_what_it_started_and_only_that():
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    before, engine, folder = driver.stdout.readline().split()
    before, engine = int(before), int(engine)
    sandbox = [p.pid for p in psutil.Process(engine).children()]
    try:
        assert len(sandbox) == 1
        driver.kill()
        driver.wait()
        deadline = time.monotonic() + 10
        while not (_gone(engine) and _gone(sandbox[0])) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(engine) and _gone(sandbox[0])
        while os.path.exists(folder) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(folder)
        assert not _gone(bystander.pid) and not _gone(before)  # not the run's
    finally:
        for pid in (bystander.pid, before, engine, *sandbox):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_normal_end_restores_the_environment_and_ends_the_warden():
    before = os.environ.get(MARK_ENV)
    warden = Warden()
    assert os.environ[MARK_ENV] == warden.mark
    warden.close()
    assert os.environ.get(MARK_ENV) == before
    assert warden.process.returncode == 0
