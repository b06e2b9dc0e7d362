"""The default run (`rollyard train`) in fp32 and bf16, same seeds, side by side.

Each configuration is a trainer precision (``--train-dtype``) and an embedded engine precision
(``--embedded-dtype``); every run gets the defaults otherwise, and ``--steps`` and ``--seed``.
The table gives per configuration: the best 3-step mean reward, the median step time and
train time (``time/step_s``, ``time/train_s``; steps after the first), the peak resident
memory of the training rank and of the engine (sampled every 0.2 s over the processes the
run starts, by their Ray / module names), ``train/logprob_mismatch`` (the mean absolute
difference between the engine's logprobs and the trainer's recomputation, per token; mean
and largest over the steps) and the wall time, then each bf16 configuration's ratios to the
first one. The runs go one after the other; on a shared machine the times drift with the
load, the reward and the mismatch do not.

    .venv/bin/python benchmarks/precision.py [--steps 150] [--seeds 0] \\
        [--config fp32/fp32 --config bf16/bf16 --config bf16/fp32] [--rollyard-arg=--FLAG ...]

In the default run ``train/logprob_mismatch`` also holds the policy's change between the
step's mini-batch updates; with ``--rollyard-arg=--minibatches=1
--rollyard-arg=--no-replay-best`` (one update per step; no replayed samples, whose logprobs are
the trainer's own) it is the precision's alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import ROLLYARD, best_window

DEFAULT_CONFIGS = ("fp32/fp32", "bf16/bf16", "bf16/fp32")
#: process -> role, by a marker in its command line (Ray names an actor's process after it)
ROLES = {"MegatronWorker": "trainer", "rollyard_plugins.embedded_engine": "engine"}


class PeakMemory:
    """Samples the resident memory of every descendant of a process, by role."""

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.peak = dict.fromkeys(ROLES.values(), 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            try:
                children = self.root.children(recursive=True)
            except psutil.Error:
                return
            for child in children:
                try:
                    command, rss = " ".join(child.cmdline()), child.memory_info().rss
                except psutil.Error:
                    continue
                for marker, role in ROLES.items():
                    if marker in command:
                        self.peak[role] = max(self.peak[role], rss)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return {role: rss / 2**20 for role, rss in self.peak.items()}


def run(config: str, steps: int, seed: int, runs_dir: Path,
        extra: list[str]) -> dict[str, float]:
    train_dtype, engine_dtype = config.split("/")
    name = f"{train_dtype}-{engine_dtype}-s{seed}"
    argv = [*ROLLYARD, "train", "--steps", str(steps), "--seed", str(seed), "--no-progress",
            "--runs-dir", str(runs_dir), "--name", name, "--train-dtype", train_dtype,
            "--embedded-dtype", engine_dtype, *extra]
    started = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    memory = PeakMemory(process.pid)
    _, stderr = process.communicate()
    peaks = memory.stop()
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit(f"{config} (seed {seed}) failed:\n{stderr[-2000:]}")
    rows = [json.loads(line) for line in (runs_dir / name / "metrics.jsonl").open()]
    mismatch = [row["train/logprob_mismatch"] for row in rows]
    return {"best3": best_window([row["reward/mean"] for row in rows]),
            "step_s": statistics.median(row["time/step_s"] for row in rows[1:]),
            "train_s": statistics.median(row["time/train_s"] for row in rows[1:]),
            "trainer_mib": peaks["trainer"], "engine_mib": peaks["engine"],
            "mismatch": statistics.fmean(mismatch), "mismatch_max": max(mismatch),
            "wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", metavar="TRAIN/ENGINE",
                        help="dtypes of trainer and engine (default: "
                             f"{', '.join(DEFAULT_CONFIGS)})")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--seeds", default="0", help="comma-separated run seeds")
    parser.add_argument("--rollyard-arg", action="append", default=[], metavar="FLAG",
                        help="a flag every run gets (repeatable)")
    args = parser.parse_args()
    configs = args.config or list(DEFAULT_CONFIGS)
    seeds = [int(s) for s in args.seeds.split(",")]
    runs_dir = Path(tempfile.mkdtemp(prefix="rollyard-precision-"))
    results = {(c, s): run(c, args.steps, s, runs_dir, args.rollyard_arg)
               for s in seeds for c in configs}
    print(f"steps {args.steps} {' '.join(args.rollyard_arg)}; times are medians over steps "
          "2..N")
    print("| trainer / engine | seed | best 3-step mean | step s | train s | trainer peak MiB "
          "| engine peak MiB | logprob mismatch, mean / max | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (config, seed), r in results.items():
        print(f"| {config} | {seed} | {r['best3']:.3f} | {r['step_s']:.3f} | {r['train_s']:.3f} "
              f"| {r['trainer_mib']:.0f} | {r['engine_mib']:.0f} | {r['mismatch']:.2e} / "
              f"{r['mismatch_max']:.2e} | {r['wall_s']:.0f} |")
    base = configs[0]
    for config in configs[1:]:
        for seed in seeds:
            r, b = results[(config, seed)], results[(base, seed)]
            print(f"{config} / {base}, seed {seed}: step time x{r['step_s'] / b['step_s']:.2f}, "
                  f"train time x{r['train_s'] / b['train_s']:.2f}, trainer memory "
                  f"x{r['trainer_mib'] / b['trainer_mib']:.2f}, engine memory "
                  f"x{r['engine_mib'] / b['engine_mib']:.2f}")


if __name__ == "__main__":
    main()
