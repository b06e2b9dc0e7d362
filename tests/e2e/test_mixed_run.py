"""A run of two environments through the real CLI: the toy plugin twice under aliases (copy and
reverse, weights 1:3, the second with its own --max-new-tokens), each step's groups split
exactly, metrics and samples per environment, and a run killed mid-step and resumed that ends
bit for bit where the uninterrupted one does (one sequence per engine batch)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_checkpoint_resume import TIMING, Run

STEPS = 3
RUN_TOML = textwrap.dedent("""\
    steps = 3
    seed = 3
    groups_per_step = 4
    group_size = 4
    max_new_tokens = 8
    keep_zero_variance_groups = true

    [[rollout]]
    name = "toy"
    alias = "copy"
    weight = 1
    [rollout.options]
    operation = "copy"
    num_tasks = 5

    [[rollout]]
    name = "toy"
    alias = "reverse"
    weight = 3
    max_new_tokens = 5
    [rollout.options]
    operation = "reverse"
    num_tasks = 5
    """)
COMMON = ["--no-progress", "--num-cpus", "2", "--embedded-max-batch-size", "1",
          "--save-interval", "1", "--runs-dir", "runs"]


def rows(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith(TIMING)}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def samples(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def weights(run_dir: Path) -> bytes:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return (run_dir / "checkpoints" / latest / "hf" / "model.safetensors").read_bytes()


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mixed")
    (root / "run.toml").write_text(RUN_TOML)
    return root


@pytest.fixture(scope="module")
def reference(root: Path) -> Path:
    run = Run(root, "--config", "run.toml", *COMMON, "--name", "reference")
    assert run.wait() == 0, run.out.read_text()[-3000:]
    return root / "runs" / "reference"


@pytest.mark.slow
def test_each_step_splits_its_groups_by_weight_and_reports_each_environment(
        reference: Path, documented_metric) -> None:
    metrics = rows(reference)
    assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
    for row in metrics:  # 4 groups at 1:3, every step
        assert (row["samples/count/copy"], row["samples/count/reverse"]) == (4.0, 12.0)
        for env in ("copy", "reverse"):
            for key in ("reward/mean", "reward/char-f1", "reward/exact-match",
                        "response/len_mean", "rollout/zero_variance_share"):
                assert f"{key}/{env}" in row
    assert all(documented_metric(key) for row in metrics for key in row)
    drawn = samples(reference)
    assert {s["env"] for s in drawn} == {"copy", "reverse"}
    for sample in drawn:
        env = sample["env"]
        assert sample["task_id"].startswith(f"{env}/")
        assert f"{env}: " in sample["prompt_text"]  # each alias got its own operation
        if env == "reverse":  # its own --max-new-tokens
            assert len(sample["tokens"]) - sample["prompt_len"] <= 5
    report = subprocess.run([sys.executable, "-m", "rollyard.cli", "report", str(reference),
                             "--out", str(reference / "report")], capture_output=True,
                            text=True, timeout=120)
    assert report.returncode == 0, report.stderr[-3000:]
    assert (reference / "report" / "reward_env.png").read_bytes()[:4] == b"\x89PNG"
    config = json.loads((reference / "config.json").read_text())
    assert [(e["alias"], e["weight"]) for e in config["rollout"]] == [("copy", 1.0),
                                                                      ("reverse", 3.0)]


@pytest.mark.slow
def test_a_mixed_run_killed_and_resumed_ends_as_an_uninterrupted_one(root: Path,
                                                                     reference: Path) -> None:
    run_dir = root / "runs" / "chain"
    run = Run(root, "--config", "run.toml", *COMMON, "--name", "chain",
              fault="kill:train@2")
    assert run.wait() == -signal.SIGKILL
    assert (run_dir / "checkpoints" / "latest").read_text() == "step-000001\n"
    run = Run(root, "--resume", str(run_dir), "--no-progress")
    assert run.wait() == 0, run.output[-3000:]
    assert rows(run_dir) == rows(reference)
    assert samples(run_dir) == samples(reference)
    assert weights(run_dir) == weights(reference)
