"""A run through two `rollyard env-server` processes (docs/remote.md): one SIGKILLs itself as
it starts a group of step 2 (``ROLLYARD_FAULT=kill:group@2``), and every step is complete;
the run then resumes through the remote backend from its checkpoint. A wrong token fails the
run in one line before anything starts."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROLLYARD = [sys.executable, "-m", "rollyard.cli"]
TOKEN = "e2e-token"


class EnvServerProcess:
    """``rollyard env-server --rollout-plugin toy`` on a free port, its URL read from its
    first line."""

    def __init__(self, token_file: Path, log: Path, fault: str = "") -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLYARD_")}
        if fault:
            env["ROLLYARD_FAULT"] = fault
        self.log = log
        self.process = subprocess.Popen(
            [*ROLLYARD, "env-server", "--rollout-plugin", "toy", "--port", "0",
             "--token-file", str(token_file)], stderr=log.open("w"), env=env)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = re.search(r"on (http://\S+)", log.read_text())
            if found:
                self.url = found.group(1)
                return
            assert self.process.poll() is None, log.read_text()
            time.sleep(0.1)
        raise AssertionError(f"env-server did not start: {log.read_text()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def servers(tmp_path: Path, token_file: Path) -> Iterator[list[EnvServerProcess]]:
    started = [EnvServerProcess(token_file, tmp_path / "a.log", fault="kill:group@2"),
               EnvServerProcess(token_file, tmp_path / "b.log")]
    yield started
    for server in started:
        server.stop()


def train(tmp_path: Path, urls: list[str], token_file: Path, *extra: str,
          timeout: float = 600) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLYARD_")}
    return subprocess.run(
        [*ROLLYARD, "train", "--rollout-backend", "remote", "--env-server", ",".join(urls),
         "--env-token-file", str(token_file), "--env-timeout", "60",
         "--groups-per-step", "4", "--group-size", "4", "--max-new-tokens", "8",
         "--keep-zero-variance-groups", "--no-progress", "--runs-dir", str(tmp_path / "runs"),
         *extra], cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=env)


def test_wrong_token_fails_the_run_in_one_line(tmp_path, servers) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-token")
    started = time.monotonic()
    result = train(tmp_path, [servers[1].url], wrong, "--steps", "1", "--name", "bad")
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "401, the token of --env-token-file" in lines[0], result.stderr
    assert time.monotonic() - started < 60 and not (tmp_path / "runs" / "bad").exists()


@pytest.mark.slow
def test_a_run_survives_a_server_killed_mid_step_and_resumes(tmp_path, servers,
                                                             token_file) -> None:
    urls = [server.url for server in servers]
    result = train(tmp_path, urls, token_file, "--steps", "3", "--save-interval", "3",
                   "--name", "remote")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert servers[0].process.wait(5) == -9  # SIGKILLed itself at step 2
    run_dir = tmp_path / "runs" / "remote"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]
    for row in rows:  # every group of every step came back once, none lost
        assert row["samples/count"] == 16 and row["samples/failed_rate"] == 0.0, row
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    for step in (1, 2, 3):
        groups = {s["group_id"] for s in samples if s["step"] == step}
        assert len(groups) == 4, (step, groups)

    # the killed server comes back (on a new port); the run resumes from step 3's checkpoint
    # through both servers, their rollout state loaded from it
    servers[0] = EnvServerProcess(token_file, tmp_path / "a2.log")
    result = train(tmp_path, [servers[0].url, servers[1].url], token_file, "--steps", "4",
                   "--resume", str(run_dir))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3, 4]
    assert rows[-1]["samples/count"] == 16 and rows[-1]["samples/failed_rate"] == 0.0
