"""Start-up cost of the rollyard command line, with every installed plugin.

``rollyard plugins`` and ``rollyard train --help`` import every plugin's entry-point module,
so one careless top-level ``import torch`` in any plugin slows every command. This script
times both in fresh processes beside ``python -c pass`` (the interpreter's own start-up),
interleaved so that all three see the same machine load, and lists the heavy modules each
command imports, found with ``python -X importtime``.

Target: a median under 0.5 s each, and none of torch, ray, megatron, transformers or
verifiers imported. Exit status 1 when either is missed.

    .venv/bin/python benchmarks/startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HEAVY = ("torch", "ray", "megatron", "transformers", "verifiers")
TARGET_S = 0.5
ROLLYARD = str(Path(sys.executable).with_name("rollyard"))
BASELINE = "python -c pass"
COMMANDS: dict[str, list[str]] = {
    BASELINE: [sys.executable, "-c", "pass"],
    "rollyard plugins": [ROLLYARD, "plugins"],
    "rollyard train --help": [ROLLYARD, "train", "--help"],
}
ENV = {k: v for k, v in os.environ.items() if not k.startswith("ROLLYARD_")}


def wall_time(argv: list[str]) -> float:
    """Seconds from spawning ``argv`` to its exit."""
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
                   check=True)
    return time.perf_counter() - started


def median_times(runs: int) -> dict[str, float]:
    """Median wall time of each command; the commands take turns so load hits all alike."""
    for argv in COMMANDS.values():  # warm the file cache
        wall_time(argv)
    samples: dict[str, list[float]] = {label: [] for label in COMMANDS}
    for _ in range(runs):
        for label, argv in COMMANDS.items():
            samples[label].append(wall_time(argv))
    return {label: statistics.median(values) for label, values in samples.items()}


def heavy_imports(cli_args: list[str]) -> list[str]:
    """Heavy top-level packages that ``rollyard <cli_args>`` imports."""
    code = f"import sys; from rollyard.cli import main; sys.exit(main({cli_args!r}))"
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0]
                for line in result.stderr.splitlines() if line.startswith("import time:")}
    return sorted(imported & set(HEAVY))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command")
    args = parser.parse_args()

    medians = median_times(args.runs)
    baseline = medians[BASELINE]
    ok = True
    print(f"start-up, median of {args.runs} fresh processes (target < {TARGET_S} s, "
          f"no {', '.join(HEAVY)})")
    print(f"{'command':<24}{'median s':>10}{'x python':>10}  {'target':<8}heavy modules")
    for label, argv in COMMANDS.items():
        median = medians[label]
        if label == BASELINE:
            print(f"{label:<24}{median:>10.3f}{1.0:>10.1f}")
            continue
        heavy = heavy_imports(argv[1:])
        met = median < TARGET_S and not heavy
        ok &= met
        print(f"{label:<24}{median:>10.3f}{median / baseline:>10.1f}  "
              f"{'ok' if met else 'MISSED':<8}{', '.join(heavy) or 'none'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
