"""``rollyard train --rollout-plugin codegolf`` end to end on the embedded default, in feedback
mode: the tiny model's programs run in the sandbox inside the Ray rollout worker, a failing one
is shown its failing case and answers again, and the last program is scored."""

import json
import subprocess
import sys

import pytest
from rollyard_codegolf.scoring import REASONS


@pytest.mark.slow
def test_train_runs_codegolf_programs_in_the_sandbox_with_feedback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "rollyard.cli", "train", "--rollout-plugin", "codegolf",
         "--steps", "2", "--groups-per-step", "2", "--group-size", "4",
         "--max-new-tokens", "16", "--keep-zero-variance-groups", "--no-progress",
         "--codegolf-attempts", "2", "--codegolf-extract", "whole", "--codegolf-timeout", "2",
         "--codegolf-weight-fast", "0.1", "--name", "golf", "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "runs" / "golf"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["samples/count"] == 8 and row["samples/failed_rate"] == 0.0
        assert row["train/num_samples_trained"] > 0
        shares = {k: v for k, v in row.items() if k.startswith("env/codegolf/")
                  and k != "env/codegolf/passing_length"}
        assert sum(shares.values()) == pytest.approx(1.0)
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 16
    for sample in samples:
        record = sample["metadata"]["codegolf"]
        # --codegolf-extract whole: every reply is a program, and the sandbox ran it
        assert record["program"] is not None and record["reason"] in {None, *REASONS}
        assert record["reason"] != "no_code"
        assert set(sample["rewards"]) == {"codegolf.correct", "codegolf.concise",
                                          "codegolf.fast"}
        assert sample["metadata"]["attempts"] in (1, 2)
    # the tiny model's programs fail: shown the failing case, it answered again
    assert any(sample["metadata"]["attempts"] == 2 for sample in samples)
