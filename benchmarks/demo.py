"""The default run (`rollyard train` with no options): mean reward per step and wall time.

Target: the mean reward at least doubles from its first-step value within 5 minutes on a
2-core CPU machine. Prints the per-step rewards, the ratio mean-of-last-5 / first, and times.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    steps = sys.argv[1] if len(sys.argv) > 1 else "150"
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "rollyard.cli", "train", "--steps", steps, "--no-progress",
             "--runs-dir", tmp, "--name", "bench"], capture_output=True, text=True)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-4000:], sep="\n")
            return 1
        rows = [json.loads(line)
                for line in (Path(tmp) / "bench" / "metrics.jsonl").read_text().splitlines()]
    rewards = [row["reward/mean"] for row in rows]
    print("step  mean_reward  step_s  tokens/s")
    for row in rows:
        print(f"{row['step']:>4}  {row['reward/mean']:11.3f}  {row['time/step_s']:6.1f}  "
              f"{row['perf/tokens_per_s']:8.1f}")
    late = sum(rewards[-5:]) / len(rewards[-5:])
    ratio = late / rewards[0] if rewards[0] > 0 else float("inf")
    print(f"first-step reward {rewards[0]:.3f}; mean of the last 5 steps {late:.3f}; "
          f"ratio {ratio:.2f} (target >= 2.0)")
    print(f"wall time {wall:.0f} s for {len(rows)} steps (target: within 300 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
