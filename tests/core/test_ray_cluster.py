"""Starting Ray for a run: a local cluster starts once, quietly, with token authentication, in
a session of its own, and leaves no pointer to itself where a plain ``ray.init()`` looks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rollyard.run import ray_cluster

START_TWICE = """
from rollyard.run.ray_cluster import start_ray, stop_ray
first, second = start_ray(None, 1), start_ray(None, 1)
import os, ray

@ray.remote
def session():
    return os.getsid(0)

print("started", first, second, ray.cluster_resources()["CPU"], os.environ["RAY_AUTH_MODE"])
print("sessions", os.getsid(0), ray.get(session.remote()))
print("address", ray.get_runtime_context().gcs_address)
stop_ray()
"""


@pytest.mark.slow
def test_a_local_cluster_starts_once_without_the_token_authentication_warning(
        tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    env.update(HOME=str(tmp_path), RAY_TMPDIR=ray_dir)  # Ray's token is made in tmp_path
    try:
        done = subprocess.run([sys.executable, "-c", START_TWICE], env=env,
                              capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert done.returncode == 0, done.stderr
    assert "started True False 1.0 token" in done.stdout
    assert "Token authentication" not in done.stderr, done.stderr
    assert "Connecting to existing Ray cluster" not in done.stderr, done.stderr
    assert (tmp_path / ".ray" / "auth_token").is_file()
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    driver, worker = lines["sessions"].split()
    assert driver != worker  # a signal to the driver's process group does not reach Ray
    pointer = Path("/tmp/ray/ray_current_cluster")
    assert not pointer.exists() or lines["address"] not in pointer.read_text()


def test_an_authentication_mode_the_user_chose_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    ray_cluster._choose_auth_mode()
    assert os.environ["RAY_AUTH_MODE"] == "disabled"
