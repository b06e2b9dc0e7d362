"""Runs people can leave going, through the real CLI on the embedded CPU default.

With a fixed seed and one sequence per engine batch (batching changes float32 sums, see
docs/training.md), two runs write the same metrics.jsonl and the same weights; a run killed
anywhere — in the middle of a save included — and resumed ends exactly where an uninterrupted
run does; SIGTERM to the run's process group saves, stops every process the run started and
exits 143; after SIGKILL of the driver nothing it started is left within 10 s; SIGINT to the
group while a rollout takes "minutes" drops that rollout past --stop-timeout, saves the step
before and exits 130; --max-seconds stops after a step, saves and exits 0. A stop whose save
meets a full disk, or whose update runs past --stop-timeout with nothing saved, is tested on the
loop itself (tests/core/test_async_loop.py); a failing checkpoint writer on the checkpoint store
(tests/core/test_checkpoints.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

STEPS = 5
#: Four training words (and one eval word), so later steps meet their tasks again and
#: replay their best samples (--replay-best): a resumed run must restore those too.
COMMON = ["--steps", str(STEPS), "--seed", "5", "--groups-per-step", "2", "--group-size", "4",
          "--max-new-tokens", "8", "--no-progress", "--num-cpus", "2",
          "--embedded-max-batch-size", "1", "--toy-num-tasks", "5"]
TAG = "ROLLYARD_TEST_RUN"  # marks every process a test's run starts, to find leftovers
TIMING = ("time/", "perf/", "train/step_time", "train/tokens_per_s", "train/rank_step_time")
#: The second run evaluates every 2 steps (and after the last) and writes TensorBoard events.
OBSERVED = ["--eval-interval", "2", "--eval-tasks", "4", "--eval-samples", "3",
            "--eval-temperature", "1.0", "--tensorboard"]


class Run:
    """One ``rollyard train`` process in its own session, its output in files."""

    def __init__(self, root: Path, *args: str, fault: str | None = None) -> None:
        self.tag = uuid.uuid4().hex
        self.out = root / f"out-{self.tag}.txt"
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLYARD_")}
        env[TAG] = self.tag
        env["COLUMNS"] = "1000"  # one line per message, however long its paths
        if fault:
            env["ROLLYARD_FAULT"] = fault
        with open(self.out, "w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "rollyard.cli", "train", *args], cwd=root, env=env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def output(self) -> str:
        return " ".join(self.out.read_text().split())

    def wait(self, timeout: float = 300) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            # a killed run's warden is still sweeping: let it finish before killing leftovers
            deadline = time.monotonic() + 15
            while tagged(self.tag) and time.monotonic() < deadline:
                time.sleep(0.2)
            kill_tagged(self.tag)

    def wait_for(self, text: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            if self.process.poll() is not None or time.monotonic() > deadline:
                kill_tagged(self.tag)
                raise AssertionError(f"never printed {text!r}:\n{self.out.read_text()[-3000:]}")
            time.sleep(0.2)


def tagged(tag: str) -> list[psutil.Process]:
    """Live processes (zombies aside) whose environment carries ``tag``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(TAG) == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            pass
    return found


def kill_tagged(tag: str) -> None:
    procs = tagged(tag)
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)


def rows(run_dir: Path) -> list[dict]:
    """The training steps' rows of metrics.jsonl (not the eval of step 0) without the timing
    and evaluation keys."""
    return [{k: v for k, v in row.items() if not k.startswith((*TIMING, "eval/"))}
            for row in raw_rows(run_dir) if row["step"] > 0]


def raw_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def final_weights(run_dir: Path) -> bytes:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    assert latest == f"step-{STEPS:06d}"
    return (run_dir / "checkpoints" / latest / "hf" / "model.safetensors").read_bytes()


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("resume")


@pytest.fixture(scope="module")
def reference(root: Path) -> Path:
    """An uninterrupted run that saves after every step."""
    run = Run(root, *COMMON, "--save-interval", "1", "--runs-dir", "runs", "--name", "reference")
    assert run.wait() == 0, run.out.read_text()[-3000:]
    return root / "runs" / "reference"


@pytest.fixture(scope="module")
def observed(root: Path) -> Path:
    """The reference run again, saving only at the end, evaluating and with TensorBoard."""
    run = Run(root, *COMMON, *OBSERVED, "--runs-dir", "runs", "--name", "again")
    assert run.wait() == 0, run.out.read_text()[-3000:]
    return root / "runs" / "again"


@pytest.mark.slow
def test_two_runs_with_the_same_seed_write_the_same_metrics_and_weights(reference, observed):
    assert [r["step"] for r in rows(observed)] == list(range(1, STEPS + 1))
    assert sum(r["rollout/replayed"] for r in rows(reference)) > 0
    assert rows(observed) == rows(reference)
    assert final_weights(observed) == final_weights(reference)
    # the samples too: same tokens, logprobs, rewards, group names, text
    assert (observed / "samples.jsonl").read_text() == \
        (reference / "samples.jsonl").read_text()


@pytest.mark.slow
def test_evaluation_runs_every_interval_and_after_the_last_step(observed):
    evaluated = {row["step"]: row for row in raw_rows(observed) if "eval/reward" in row}
    assert sorted(evaluated) == [0, 2, 4, STEPS]  # step 0: the untrained model
    for row in evaluated.values():
        assert row["eval/tasks"] == 1  # --eval-tasks 4, but the eval split has one word
        assert 0 <= row["eval/pass@1"] <= row["eval/pass@3"] <= 1
        assert 0 <= row["eval/reward"] <= 2 and row["time/eval_s"] > 0
    samples = [json.loads(line) for line in (observed / "samples.jsonl").read_text().splitlines()]
    assert not [s for s in samples if s["task_id"].startswith("eval")]  # training samples only
    first = samples[0]
    assert first["prompt_text"].endswith("assistant\n") and "copy: " in first["prompt_text"]
    assert isinstance(first["response_text"], str)
    assert set(first["rewards"]) == {"char-f1", "exact-match"}
    assert first["status"] in ("completed", "truncated") and first["failure"] is None
    assert first["weight_version"] == 0


@pytest.mark.slow
def test_every_metrics_key_is_documented(observed, documented_metric):
    keys = {key for row in raw_rows(observed) for key in row}
    assert {"time/elapsed_s", "time/unix", "eval/pass@3", "train/entropy"} <= keys
    assert [key for key in sorted(keys) if not documented_metric(key)] == []


@pytest.mark.slow
def test_tensorboard_has_every_metric_and_a_sample_table(observed):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(observed / "tensorboard"), size_guidance={"scalars": 0,
                                                                              "tensors": 0})
    events.Reload()
    keys = {key for row in raw_rows(observed) for key in row if key != "step"}
    assert set(events.Tags()["scalars"]) == keys
    metrics = [row for row in raw_rows(observed) if row["step"] > 0]
    rewards = events.Scalars("reward/mean")
    assert [e.step for e in rewards] == [r["step"] for r in metrics]
    assert [e.value for e in rewards] == pytest.approx([r["reward/mean"] for r in metrics])
    tables = events.Tensors("samples")
    assert [t.step for t in tables] == list(range(1, STEPS + 1))
    text = tables[0].tensor_proto.string_val[0].decode()
    assert text.startswith("| task | status | reward | prompt | response |")
    assert text.count("\n| copy-") == 4  # --tensorboard-samples 4 by default


@pytest.mark.slow
def test_report_summarises_and_plots_two_runs(root, reference, observed):
    out = root / "report"
    result = subprocess.run([sys.executable, "-m", "rollyard.cli", "report", str(reference),
                             str(observed), "--out", str(out)], cwd=root, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "reference" in result.stdout and "again" in result.stdout
    last = raw_rows(observed)[-1]
    assert f"{last['eval/reward']:.3f}" in result.stdout  # the observed run's eval column
    pngs = {"reward_step.png", "reward_time.png", "eval_reward.png", "entropy.png",
            "response_length.png", "failure_rate.png", "step_time.png"}
    assert {p.name for p in out.iterdir()} == pngs
    for name in pngs:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
@pytest.mark.timeout(1200)  # seven runs of the CLI, on a machine that may be shared
def test_a_run_killed_anywhere_and_resumed_ends_as_an_uninterrupted_one(root, reference):
    run_dir = root / "runs" / "chain"
    first = [*COMMON, "--save-interval", "1", "--runs-dir", "runs", "--name", "chain"]
    resume = ["--resume", str(run_dir)]
    checkpoints = run_dir / "checkpoints"

    # 1. SIGKILL in the middle of saving step 2: its half-written folder is passed over
    run = Run(root, *first, fault="kill:save:trainer@2")
    assert run.wait() == -signal.SIGKILL
    assert (checkpoints / ".partial-step-000002").is_dir()
    assert (checkpoints / "latest").read_text() == "step-000001\n"

    # 2. resumed with a time budget: it says what it passed over, trains step 2 and stops
    run = Run(root, *resume, "--max-seconds", "0.001")
    assert run.wait() == 0, run.output[-3000:]
    assert (f"resuming {run_dir} from step-000001 (checkpoints: .partial-step-000002 is "
            "half-written (the run stopped while saving it); using step-000001)") in run.output
    assert f"stopped after step 2: --max-seconds 0.001 reached; checkpoint {checkpoints}" \
           f"/step-000002" in run.output
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step-000002"]

    # 3. SIGTERM to the run's whole process group during step 3 (as `timeout` or Slurm send
    # it): it finishes the step, saves, stops everything, exits 143
    run = Run(root, *resume, "--max-seconds", "0", fault="pause:train@3")  # 0: no limit again
    run.wait_for("paused at train (step 3)")
    started = psutil.Process(run.process.pid).children(recursive=True)
    assert any("embedded_engine" in " ".join(p.cmdline()) for p in started)
    assert any(p.name() == "raylet" for p in started)
    os.killpg(run.process.pid, signal.SIGTERM)
    assert run.process.wait(120) == 143, run.output[-3000:]
    _, alive = psutil.wait_procs(started, timeout=15)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    assert not alive and not tagged(run.tag), f"left running: {alive or tagged(run.tag)}"
    assert (f"stopped by SIGTERM after step 3; checkpoint {checkpoints}/step-000003 (continue "
            f"with: rollyard train --resume {run_dir})") in run.output
    assert (checkpoints / "latest").read_text() == "step-000003\n"

    # 4. SIGKILL of the driver during step 4: within 10 s nothing it started is left
    run = Run(root, *resume, fault="pause:train@4")
    run.wait_for("paused at train (step 4)")
    started = psutil.Process(run.process.pid).children(recursive=True)
    os.kill(run.process.pid, signal.SIGKILL)
    assert run.process.wait(10) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while tagged(run.tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not tagged(run.tag), f"left running: {[p.cmdline()[:3] for p in tagged(run.tag)]}"
    assert not [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

    # 5. Ctrl-C (SIGINT to the group) while step 5's rollout takes "minutes": step 4 is
    # trained but not saved (--save-interval 0); past --stop-timeout the rollout of step 5 is
    # dropped and step 4 saved from the state before it; nothing is left running; exit 130
    run = Run(root, *resume, "--save-interval", "0", "--stop-timeout", "2",
              fault="stall:rollout@5")
    run.wait_for("stalling the rollout workers at rollout (step 5)")
    os.killpg(run.process.pid, signal.SIGINT)
    assert run.process.wait(120) == 130, run.output[-3000:]
    assert ("stopped by SIGINT after step 4 (step 5 abandoned in its rollout at "
            f"--stop-timeout 2); checkpoint {checkpoints}/step-000004") in run.output
    assert (checkpoints / "latest").read_text() == "step-000004\n"
    assert not tagged(run.tag), f"left running: {tagged(run.tag)}"

    # 6. resumed to the end: the same rewards and the same weights, bit for bit
    run = Run(root, *resume)
    assert run.wait() == 0, run.output[-3000:]
    assert [r["step"] for r in rows(run_dir)] == list(range(1, STEPS + 1))
    assert rows(run_dir) == rows(reference)
    assert final_weights(run_dir) == final_weights(reference)
