"""Sweep ``rollyard train`` settings on the toy tasks, one run after the other, and print one
table: best 3-step mean reward, mean reward of the last 10 steps, steps and wall time.

    .venv/bin/python benchmarks/sweep.py --steps 150 --seeds 0,1 \\
        --config "grpo lr=3e-3:--algorithm grpo --lr 3e-3" \\
        --config "dapo lr=3e-3:--algorithm dapo --lr 3e-3"

Each ``--config`` is ``LABEL:FLAGS``; every run also gets ``--steps``, ``--seed`` and, unless
the flags name another, the default toy task. This is how the defaults in docs/training.md were
chosen (the sweeps are in benchmarks/RESULTS.md); it measures learning per step, so it is
insensitive to machine load.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROLLYARD = [sys.executable, "-m", "rollyard.cli"]


def best_window(values: list[float], width: int = 3) -> float:
    """The best mean of ``width`` consecutive values."""
    if len(values) < width:
        return max(values, default=float("nan"))
    return max(statistics.fmean(values[i:i + width]) for i in range(len(values) - width + 1))


def run(label: str, flags: str, steps: int, seed: int, runs_dir: Path) -> dict[str, float]:
    name = f"{label.replace(' ', '_').replace('=', '')}-s{seed}"
    argv = [*ROLLYARD, "train", "--steps", str(steps), "--seed", str(seed), "--no-progress",
            "--runs-dir", str(runs_dir), "--name", name, *shlex.split(flags)]
    started = time.perf_counter()
    result = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"{label} (seed {seed}) failed:\n{result.stderr[-2000:]}")
    rows = [json.loads(line) for line in (runs_dir / name / "metrics.jsonl").open()]
    rewards = [row["reward/mean"] for row in rows]
    return {"best3": best_window(rewards), "last10": statistics.fmean(rewards[-10:]),
            "wall_s": wall, "entropy": rows[-1].get("train/entropy", float("nan"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", required=True, metavar="LABEL:FLAGS")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--seeds", default="0", help="comma-separated run seeds")
    parser.add_argument("--runs-dir", type=Path, default=None)
    args = parser.parse_args()
    runs_dir = args.runs_dir or Path(tempfile.mkdtemp(prefix="rollyard-sweep-"))
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"| config | best 3-step mean | last 10 mean | final entropy | wall s | "
          f"(steps {args.steps}, seeds {args.seeds}) |")
    print("|---|---|---|---|---|---|")
    for item in args.config:
        label, _, flags = item.partition(":")
        results = [run(label, flags, args.steps, seed, runs_dir) for seed in seeds]
        mean = {k: statistics.fmean(r[k] for r in results) for k in results[0]}
        spread = " / ".join(f"{r['best3']:.3f}" for r in results)
        print(f"| {label} | {mean['best3']:.3f} ({spread}) | {mean['last10']:.3f} | "
              f"{mean['entropy']:.2f} | {mean['wall_s']:.0f} | `{flags}` |", flush=True)


if __name__ == "__main__":
    main()
