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
def test_run_joins_an_existing_cluster_and_places_its_rollout_workers_by_resource(tmp_path):
    """The run joins a hand-started two-node cluster; its rollout workers ask for a custom
    resource only the second node has (``--rollout-resources``); a relative --runs-dir is
    resolved in the driver, not in the cluster's workers."""
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
    node = None
    try:
        _wait_for_nodes(ray_bin, address, env, 1, head)
        # a second node, the only one with the custom resource the rollout workers ask for
        node = subprocess.Popen(
            [str(ray_bin), "start", "--address", address, "--block", "--num-cpus", "1",
             "--resources", json.dumps({"env_node": 2}), "--object-store-memory",
             str(100 * 1024**2), "--disable-usage-stats"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env=env)
        _wait_for_nodes(ray_bin, address, env, 2, node)
        result = subprocess.run(
            [sys.executable, "-m", "rollyard.cli", "train", "--ray-address", address,
             "--steps", "1", "--groups-per-step", "2", "--group-size", "4",
             "--max-new-tokens", "8", "--keep-zero-variance-groups", "--no-progress",
             "--rollout-resources", "env_node=1", "--runs-dir", "runs", "--name", "joined"],
            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        rows = (tmp_path / "runs" / "joined" / "metrics.jsonl").read_text().splitlines()
        assert json.loads(rows[0])["weight_version"] == 1.0
        # the rollout worker ran on the node with the resource
        placed = json.loads(subprocess.run(
            [sys.executable, "-c", PLACEMENT, address], capture_output=True, text=True,
            timeout=120, env=env, check=True).stdout.splitlines()[-1])
        assert set(placed["RolloutWorker"]) == {placed["env_node"]}
        # the cluster belongs to its owner: the run must not have shut it down
        assert subprocess.run([str(ray_bin), "status", "--address", address],
                              capture_output=True, env=env).returncode == 0
    finally:
        if node is not None:
            _stop_group(node)
        _stop_group(head)
        shutil.rmtree(ray_dir, ignore_errors=True)


#: Prints, as JSON, the node of each actor class the cluster ran and the node with env_node.
PLACEMENT = """
import json, sys
import ray
import ray._private.state as state
ray.init(address=sys.argv[1], logging_level="ERROR")
placed = {}
for actor in state.actors().values():
    placed.setdefault(actor["ActorClassName"], []).append(actor["Address"]["NodeID"])
placed["env_node"] = next(n["NodeID"] for n in ray.nodes() if "env_node" in n["Resources"])
print(json.dumps(placed))
"""


def _wait_for_nodes(ray_bin: Path, address: str, env: dict, count: int,
                    process: subprocess.Popen) -> None:
    """Until the cluster at ``address`` has ``count`` live nodes (``process``: the last one
    started, whose output tells why it did not come up)."""
    script = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR'); "
              "print(sum(n['Alive'] for n in ray.nodes()))")
    deadline = time.monotonic() + 180
    while True:
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline, f"the cluster never had {count} nodes"
        if subprocess.run([str(ray_bin), "status", "--address", address],
                          capture_output=True, env=env).returncode == 0:
            found = subprocess.run([sys.executable, "-c", script, address],
                                   capture_output=True, text=True, env=env)
            if found.returncode == 0 and int(found.stdout.split()[-1]) >= count:
                return
        time.sleep(1)


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
