"""``rollyard train --weight-sync disk`` keeps the engines on the trainer's weights step after
step, and every step reports where its time went. The default, ``distributed``, is exercised
the same way by tests/e2e/test_train_loop.py. The rollout is ``guess``, the shipped
step-style multi-turn game: every turn of an episode must see the weights of the step before."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_three_steps_with_disk_weight_sync(tmp_path):
    mode = "disk"
    result = subprocess.run(
        [sys.executable, "-m", "rollyard.cli", "train", "--steps", "3", "--weight-sync", mode,
         "--rollout-plugin", "guess", "--guess-turns", "3",
         "--groups-per-step", "2", "--group-size", "4", "--max-new-tokens", "8",
         "--keep-zero-variance-groups", "--no-progress", "--name", mode,
         "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "runs" / mode
    assert json.loads((run_dir / "config.json").read_text())["weight_sync"] == mode
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]
    assert [row["weight_version"] for row in rows] == [1, 2, 3]
    for row in rows:
        for key in ("time/rollout_s", "time/train_s", "time/weight_sync_s"):
            assert 0 < row[key] < row["time/step_s"], key
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    # every sample was generated with the weights of the step before its own
    assert all(s["weight_version"] == s["step"] - 1 for s in samples)
    # multi-turn: the environment's hints are in the samples, masked out of the loss
    assert {s["status"] for s in samples} <= {"completed", "truncated"}
    assert max(s["metadata"]["turns"] for s in samples) == 3
    assert all(0 in s["loss_mask"] and 1 in s["loss_mask"] for s in samples
               if s["metadata"]["turns"] > 1)
    assert all(s["rewards"] == {"env": s["reward"]} for s in samples)
    exported = sorted(p.name for p in (run_dir / "weights").glob("step-*"))
    assert exported == ["step-00002", "step-00003"]
