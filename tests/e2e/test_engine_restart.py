"""An engine that dies during a run is restarted and re-synced; the run goes on."""

import json
import subprocess
import sys
import time

import psutil
import pytest


def _engine_children(pid: int) -> list[psutil.Process]:
    return [p for p in psutil.Process(pid).children(recursive=True)
            if "rollyard_plugins.embedded_engine" in " ".join(p.cmdline())]


def _rows(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_killed_engine_is_restarted_with_the_current_weights(tmp_path):
    run_dir = tmp_path / "runs" / "restart"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rollyard.cli", "train", "--steps", "8", "--groups-per-step", "2",
         "--group-size", "4", "--max-new-tokens", "8", "--keep-zero-variance-groups",
         "--failure-threshold", "1.0", "--no-progress", "--runs-dir", str(tmp_path / "runs"),
         "--name", "restart"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 600
        while len(_rows(run_dir / "metrics.jsonl")) < 2:
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the run never reached step 2"
            time.sleep(0.05)
        (engine,) = _engine_children(proc.pid)
        engine.kill()
        output, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output[-3000:]
    rows = _rows(run_dir / "metrics.jsonl")
    assert len(rows) == 8
    assert sum(row["engines/restarted"] for row in rows) == 1
    restarted_at = next(row["step"] for row in rows if row["engines/restarted"])
    samples = _rows(run_dir / "samples.jsonl")
    after = [s for s in samples if s["step"] > restarted_at and s["status"] != "failed"]
    assert after, "no sample was generated after the restart"
    # the restarted engine serves the latest weights, not the base model
    assert all(s["weight_version"] == s["step"] - 1 for s in after)
