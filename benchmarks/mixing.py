"""What mixing environments costs: steps/s of a run of two environments against a run of one,
at the same groups per step, side by side in one run.

The single run is the toy copy task, 16 groups × 8 samples, 6 new tokens, on the tiny model; the
mixed run splits the same 16 groups 1:1 between the toy plugin twice, under the aliases
``copy`` and ``reverse`` (so the work per group is alike and what differs is the mixing: two
rollout pools, the quotas, per-environment metrics). Each round runs both, alternating which
goes first because the machine is shared; a run's steps/s is taken over its steps after the
first, from ``time/elapsed_s``. Target: the mixed run at ≥ 0.95 of the single one.

Usage::

    python benchmarks/mixing.py [--steps 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vs_trl  # noqa: E402

MIX_TOML = textwrap.dedent("""\
    [[rollout]]
    name = "toy"
    alias = "copy"
    [rollout.options]
    operation = "copy"

    [[rollout]]
    name = "toy"
    alias = "reverse"
    [rollout.options]
    operation = "reverse"
    """)
RUNS = {"single": ["--rollout-plugin", "toy", "--toy-operation", "copy"],
        "mixed": ["--config", "{mix}"]}


def run_one(args: argparse.Namespace, kind: str, model: Path, out: Path, tag: str) -> float:
    """Steps/s of one ``rollyard train`` run of ``kind``."""
    selection = [part.format(mix=out / "mix.toml") for part in RUNS[kind]]
    return vs_trl.toy_steps_per_s(args.rollyard, f"{kind}-{tag}", selection, model, out,
                                  args.steps, args.quiet_wait)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/rollyard-bench-mixing"))
    parser.add_argument("--quiet-wait", type=float, default=30.0,
                        help="seconds to wait for the machine to go quiet before each run")
    parser.add_argument("--rollyard", default=str(Path(sys.executable).parent / "rollyard"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mix.toml").write_text(MIX_TOML)
    model = args.out / "model"
    if not (model / "config.json").exists():
        subprocess.run([args.rollyard, "init-model", str(model), "--seed", "0"], check=True)
    results: dict[str, list[float]] = {"single": [], "mixed": []}
    for round_ in range(args.rounds):
        order = ["single", "mixed"] if round_ % 2 == 0 else ["mixed", "single"]
        for kind in order:
            results[kind].append(run_one(args, kind, model, args.out, str(round_)))
            print(f"round {round_ + 1} {kind}: {results[kind][-1]:.3f} steps/s", flush=True)
    single, mixed = (statistics.fmean(results[k]) for k in ("single", "mixed"))
    print("| run | steps/s (mean of rounds) | rounds |")
    print("|---|---|---|")
    for kind, mean in (("single (toy copy)", single), ("mixed (copy:1, reverse:1)", mixed)):
        key = kind.split()[0]
        print(f"| {kind} | {mean:.3f} | {', '.join(f'{v:.3f}' for v in results[key])} |")
    print(f"mixed / single steps/s: {mixed / single:.3f} (target >= 0.95)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
