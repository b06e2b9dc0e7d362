"""What an isolated rollout environment costs, measured side by side on the toy task.

1. First build of the toy's isolated venv (a fresh ``ROLLYARD_ENVS_DIR``, uv's cache as it is)
   and the cached look-up a later run does instead.
2. Rollout worker start-up: a pool of one worker on the core's Python vs on the venv's.
3. Per-step time: ``rollyard train`` on the toy task with ``--rollout-env shared`` and
   ``--rollout-env isolated``, runs interleaved; the median of steps 2.. (step 1 warms up).

Target: per-step time isolated / shared ≤ 1.05. Exit status 1 when missed.

    .venv/bin/python benchmarks/isolation.py [--steps 6] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.05
ROLLYARD = str(Path(sys.executable).with_name("rollyard"))


def first_build_and_lookup(envs: Path) -> tuple[float, float, str]:
    """Seconds to build the toy's venv in an empty cache, then to find it cached."""
    os.environ["ROLLYARD_ENVS_DIR"] = str(envs)
    from rollyard.isolation.envs import ensure_env, env_spec

    spec = env_spec("rollyard")
    started = time.perf_counter()
    ensure_env(spec, lambda line: None)
    built = time.perf_counter() - started
    started = time.perf_counter()
    ensure_env(spec, lambda line: None)
    return built, time.perf_counter() - started, str(spec.python_path)


def worker_startup(python: str, model_dir: Path, repeats: int) -> tuple[float, float]:
    """Median seconds until a one-worker pool is up: shared, isolated (interleaved)."""
    import ray
    from rollyard.config import RunConfig
    from rollyard.run.rollout_workers import RolloutPool, RolloutSpec

    config = RunConfig(rollout_plugin="toy")
    times: dict[str | None, list[float]] = {None: [], python: []}
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for _ in range(repeats):
            for py in times:
                spec = RolloutSpec(config, {"exact-match": 1.0}, str(model_dir),
                                   ["http://127.0.0.1:9"], python=py)
                started = time.perf_counter()
                pool = RolloutPool(spec, 1)
                times[py].append(time.perf_counter() - started)
                pool.close()
    finally:
        ray.shutdown()
    return statistics.median(times[None]), statistics.median(times[python])


def step_times(mode: str, steps: int, model_dir: Path, envs: Path,
               runs: Path) -> list[dict[str, float]]:
    """``time/step_s`` and ``time/rollout_s`` of each step of one toy run with
    ``--rollout-env mode``."""
    name = f"{mode}-{time.monotonic_ns()}"
    subprocess.run([ROLLYARD, "train", "--rollout-env", mode, "--steps", str(steps),
                    "--model", str(model_dir), "--runs-dir", str(runs), "--name", name,
                    "--groups-per-step", "4", "--group-size", "4", "--max-new-tokens", "8",
                    "--num-cpus", "2", "--keep-zero-variance-groups", "--no-progress"],
                   check=True, capture_output=True,
                   env={**os.environ, "ROLLYARD_ENVS_DIR": str(envs)})
    lines = (runs / name / "metrics.jsonl").read_text().splitlines()
    return [{key: json.loads(line)[f"time/{key}"] for key in ("step_s", "rollout_s")}
            for line in lines]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="steps per training run")
    parser.add_argument("--repeats", type=int, default=2, help="runs per mode (interleaved)")
    args = parser.parse_args()

    from rollyard.models.tiny import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="rollyard-isolation-bench-") as tmp:
        root = Path(tmp)
        model_dir = build_tiny_model(root / "model", arch="qwen3", seed=0)
        built, lookup, python = first_build_and_lookup(root / "envs")
        print(f"isolated venv of the toy: first build {built:.1f} s, cached look-up "
              f"{lookup:.2f} s")
        shared_up, isolated_up = worker_startup(python, model_dir, args.repeats + 1)
        print(f"rollout worker start-up (median): shared {shared_up:.2f} s, isolated "
              f"{isolated_up:.2f} s ({isolated_up / shared_up:.2f}x)")
        per_step: dict[str, list[dict[str, float]]] = {"shared": [], "isolated": []}
        for _ in range(args.repeats):
            for mode in per_step:
                per_step[mode] += step_times(mode, args.steps, model_dir, root / "envs",
                                             root / "runs")[1:]
    print(f"toy task, median of {len(per_step['shared'])} steps each (step 1 left out):")
    print(f"{'':<10}{'shared':>10}{'isolated':>10}{'ratio':>8}")
    ratios = {}
    for key, label in (("step_s", "step"), ("rollout_s", "rollout")):
        shared, isolated = (statistics.median(s[key] for s in per_step[m])
                            for m in ("shared", "isolated"))
        ratios[key] = isolated / shared
        print(f"{label:<10}{shared:>9.3f}s{isolated:>9.3f}s{ratios[key]:>8.3f}")
    met = ratios["step_s"] <= TARGET
    print(f"per-step overhead of isolation: {ratios['step_s'] - 1:+.1%} (target ≤ "
          f"{TARGET - 1:.0%}): {'ok' if met else 'MISSED'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
