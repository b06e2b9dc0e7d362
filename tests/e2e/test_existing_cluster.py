"""`--ray-address`: the run joins a Ray cluster someone else started, and leaves it running."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_run_joins_an_existing_cluster(tmp_path):
    port = _free_port()
    ray_bin = Path(sys.executable).with_name("ray")
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    # a hand-started cluster with Ray's default token auth needs a token file; not under test
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    head = subprocess.Popen(
        [str(ray_bin), "start", "--head", "--block", "--port", str(port), "--num-cpus", "2",
         "--include-dashboard", "false", "--object-store-memory", str(200 * 1024**2),
         "--disable-usage-stats", "--temp-dir", ray_dir],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env=env)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while subprocess.run([str(ray_bin), "status", "--address", address],
                             capture_output=True, env=env).returncode != 0:
            assert head.poll() is None, head.stdout.read()
            assert time.monotonic() < deadline, "the Ray head never came up"
            time.sleep(1)
        result = subprocess.run(
            [sys.executable, "-m", "rollyard.cli", "train", "--ray-address", address,
             "--steps", "1", "--groups-per-step", "2", "--group-size", "4",
             "--max-new-tokens", "8", "--keep-zero-variance-groups", "--no-progress",
             "--runs-dir", str(tmp_path / "runs"), "--name", "joined"],
            capture_output=True, text=True, timeout=600, env=env)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        rows = (tmp_path / "runs" / "joined" / "metrics.jsonl").read_text().splitlines()
        assert json.loads(rows[0])["weight_version"] == 1.0
        # the cluster belongs to its owner: the run must not have shut it down
        assert subprocess.run([str(ray_bin), "status", "--address", address],
                              capture_output=True, env=env).returncode == 0
    finally:
        _stop_group(head)
        shutil.rmtree(ray_dir, ignore_errors=True)


def _stop_group(process: subprocess.Popen) -> None:
    """Stop the hand-started cluster: its whole process group (``ray start`` started it in a
    session of its own). A graceful stop of a Ray head takes ~30 s, and nothing of it is under
    test, so the group gets a few seconds before SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 60)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
