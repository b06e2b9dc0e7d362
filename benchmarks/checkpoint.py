"""Checkpoint cost: save and load time of the tiny and the small model, and what
``--save-interval 10`` costs a training run in steps/s.

1. Save/load: one training rank (world size 1, gloo, the CPU patches) after one Adam step,
   saved through the run's own path — a :class:`rollyard.run.checkpoints.CheckpointStore`
   folder holding the rank's model and optimizer (megatron-core dist_checkpointing), its LR
   schedule and rng states, and the HF export, fsynced and renamed — and loaded back into a
   fresh rank. Median of ``--repeats``.
2. Save interval: two ``rollyard train`` runs of the default toy setup, one with
   ``--save-interval 10`` and one saving only at the end, alternating ``--pairs`` times so that
   load from other processes hits both alike. Training time is ``time/elapsed_s`` from the first
   to the last step (saves at steps 10, 20 … included; start-up and the final save are not).
   The two runs sample differently, so their step times differ by more than a save costs;
   the saving run's own account (``time/checkpoint_s``: the seconds its loop spent starting
   saves and waiting for them, the trainer's part being written while the next rollouts run)
   gives the cost without that noise.

Usage: ``python benchmarks/checkpoint.py [--repeats 5] [--pairs 2] [--steps 40]``.
Target: ``--save-interval 10`` costs < 5% of steps/s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


def rank(model_dir: str):
    from rollyard.training.config import TrainConfig
    from rollyard.training.worker import MegatronWorker

    worker = MegatronWorker(model_dir, TrainConfig(algorithm="grpo", lr=1e-4,
                                                   micro_batch_size=8), 1, 1, 0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    worker.setup("127.0.0.1", port)
    return worker


def one_step(worker, vocab: int) -> None:
    from rollyard.training.batching import TrainItem

    rng = random.Random(0)
    items = [TrainItem([rng.randrange(vocab) for _ in range(48)], 16, [1] * 32, [-6.0] * 32,
                       1.0 if i % 2 else -1.0) for i in range(8)]
    worker.train_step(items, float(8 * 32))


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def save_load(size: str, repeats: int, tmp: Path) -> tuple[float, float, float]:
    """Median save and load seconds and the checkpoint's size in MB."""
    from rollyard.models.tiny import build_tiny_model
    from rollyard.run.checkpoints import CheckpointStore
    from rollyard.training.hf_folder import read_hf_config

    model_dir = str(build_tiny_model(tmp / f"model-{size}", size=size))
    worker = rank(model_dir)
    one_step(worker, read_hf_config(model_dir)["vocab_size"])
    store = CheckpointStore(tmp / f"run-{size}")

    def write(folder: Path) -> dict:
        worker.save_checkpoint(str(folder / "trainer"))
        worker.export_hf(str(folder / "hf"))
        return {}

    saves = []
    for step in range(1, repeats + 1):
        start = time.perf_counter()
        checkpoint = store.save(step, write)
        saves.append(time.perf_counter() - start)
    megabytes = folder_bytes(checkpoint.path) / 1e6
    worker.shutdown()
    fresh = rank(model_dir)
    loads = []
    for _ in range(repeats):
        start = time.perf_counter()
        fresh.load_checkpoint(str(checkpoint.trainer_dir))
        loads.append(time.perf_counter() - start)
    fresh.shutdown()
    return statistics.median(saves), statistics.median(loads), megabytes


def train_seconds(tmp: Path, name: str, steps: int, interval: int) -> tuple[float, float]:
    """Training seconds from the end of step 1 to the end of the last step, and the seconds
    of that spent on checkpoints."""
    runs = tmp / "runs"
    args = [sys.executable, "-m", "rollyard.cli", "train", "--steps", str(steps),
            "--save-interval", str(interval), "--no-progress", "--num-cpus", "2",
            "--runs-dir", str(runs), "--name", name]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLYARD_")}
    result = subprocess.run(args, capture_output=True, text=True, env=env, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"rollyard train failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    rows = [json.loads(line) for line in (runs / name / "metrics.jsonl").read_text().splitlines()]
    shutil.rmtree(runs / name)
    spent = sum(row.get("time/checkpoint_s", 0.0) for row in rows[1:])
    return rows[-1]["time/elapsed_s"] - rows[0]["time/elapsed_s"], spent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        print(f"save / load of one rank's checkpoint (model + Adam state + LR schedule + rng + "
              f"HF export), median of {args.repeats}:")
        for size in ("tiny", "small"):
            save, load, megabytes = save_load(size, args.repeats, tmp_path)
            print(f"  {size:5s} {megabytes:7.1f} MB   save {save * 1e3:7.1f} ms   "
                  f"load {load * 1e3:7.1f} ms")
        plain, saving, spent = [], [], []
        for pair in range(args.pairs):
            plain.append(train_seconds(tmp_path, f"plain-{pair}", args.steps, 0)[0])
            seconds, on_checkpoints = train_seconds(tmp_path, f"saving-{pair}", args.steps, 10)
            saving.append(seconds)
            spent.append(on_checkpoints / seconds)
    per_step = (args.steps - 1)
    print(f"training, default toy run, {args.steps} steps, {args.pairs} pair(s) alternating:")
    print(f"  no checkpoints until the end : {per_step / statistics.median(plain):6.3f} steps/s "
          f"({', '.join(f'{s:.1f}' for s in plain)} s)")
    print(f"  --save-interval 10           : {per_step / statistics.median(saving):6.3f} steps/s "
          f"({', '.join(f'{s:.1f}' for s in saving)} s)")
    ratio = statistics.median(plain) / statistics.median(saving)
    print(f"ratio steps/s with / without --save-interval 10: {ratio:.3f} "
          f"(side by side; run-to-run noise included)")
    print(f"share of the saving runs' training time spent on checkpoints: "
          f"{statistics.median(spent) * 100:.1f}% "
          f"({', '.join(f'{x * 100:.1f}' for x in spent)}; target < 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
