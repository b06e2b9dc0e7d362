"""Steps per second of the whole loop, sync against ``--async``, side by side in one run.

The configuration is the one new users try and ``benchmarks/vs_trl.py`` compares: the toy
rollout (copy), 16 groups × 8 samples, 6 new tokens, the tiny Qwen3 model, seed 0. Each round
runs ``rollyard train`` once in each mode (same seed, same ``--steps``), one after the other;
``--rounds`` repeats that, alternating which mode goes first, because the machine is shared and
its speed drifts. A run's steps/s is taken over its steps after the first (start-up and the
first step's warm-up excluded): ``(steps - 1) / (elapsed at the last step - elapsed at the
first)``, from ``time/elapsed_s`` in metrics.jsonl. The table also gives each mode's mean
per-step rollout, train, weight-sync, overlap and idle times.

``--partial`` adds a third run to each round, ``--async --partial-rollouts`` (a push aborts the
running generations, which go on on the new weights), and prints its steps/s against plain
async; ``--max-new-tokens`` lengthens the generations (TRL is then left out: vs_trl.py's
configuration has 6).

With TRL's virtual environment of ``benchmarks/vs_trl.py`` (``--trl-venv``, default
``benchmarks/.trl-venv``; ``--build-trl`` builds it, about 2 minutes), each round also runs
TRL's ``GRPOTrainer`` on the same model and configuration for ``--trl-budget`` seconds through
vs_trl.py's own functions, and prints rollyard's steps/s against TRL's.

Usage::

    python benchmarks/loop.py [--steps 60] [--rounds 3] [--trl-budget 30] [--build-trl]
                              [--rollyard-arg=--weight-sync=disk ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vs_trl  # noqa: E402

MODES = {"sync": [], "async": ["--async"], "partial": ["--async", "--partial-rollouts"]}
TIMES = ("rollout", "train", "weight_sync", "overlap", "idle_rollout", "idle_trainer")


def run_mode(args: argparse.Namespace, mode: str, model: Path, out: Path, tag: str) -> dict:
    """One ``rollyard train`` run of ``--steps`` steps; its steps/s and mean phase times."""
    name = f"{mode}-{tag}"
    cmd = [args.rollyard, "train", "--rollout-plugin", "toy", "--toy-operation", "copy",
           "--groups-per-step", str(vs_trl.GROUPS), "--group-size", str(vs_trl.GROUP_SIZE),
           "--max-new-tokens", str(args.max_new_tokens), "--model", str(model),
           "--seed", str(args.seed), "--steps", str(args.steps), "--no-progress",
           "--runs-dir", str(out / "runs"), "--name", name, *MODES[mode], *args.rollyard_arg]
    vs_trl.wait_until_quiet(args.quiet_wait)
    log_file = out / f"{name}.log"
    with log_file.open("w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=vs_trl.REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"rollyard {mode} exited {proc.returncode}; see {log_file}:\n"
                           f"{vs_trl.tail(log_file)}")
    rows = [json.loads(line) for line in
            (out / "runs" / name / "metrics.jsonl").read_text().splitlines()]
    span = rows[-1]["time/elapsed_s"] - rows[0]["time/elapsed_s"]
    later = rows[1:]
    result = {"mode": mode, "steps_per_s": (len(rows) - 1) / span,
              "reward_last10": statistics.fmean(r["reward/mean"] for r in rows[-10:])}
    for key in TIMES:
        result[key] = statistics.fmean(r.get(f"time/{key}_s", 0.0) for r in later)
    result["resumed_rate"] = statistics.fmean(r.get("rollout/resumed_rate", 0.0) for r in later)
    return result


def run_trl(args: argparse.Namespace, vpy: Path, model: Path, out: Path, tag: str) -> dict:
    """TRL's GRPOTrainer on the same configuration, through vs_trl.py."""
    run = vs_trl.run_trl(args, vpy, "copy", args.seed, model, out, args.trl_lr,
                         args.trl_budget, tag)
    curve = run["curve"]
    # steps after the first, over the time from the first step's end to the last one's
    span = curve[-1][0] - curve[0][0]
    return {"mode": "trl", "steps_per_s": (len(curve) - 1) / span if span else 0.0,
            "reward_last10": statistics.fmean(p[1] for p in curve[-10:])}


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps per run (default 60)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="sync + async pairs, alternating the order (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partial", action="store_true",
                        help="also run --async --partial-rollouts in each round")
    parser.add_argument("--max-new-tokens", type=int, default=vs_trl.MAX_NEW_TOKENS,
                        help=f"new tokens per sample (default vs_trl.py's, "
                             f"{vs_trl.MAX_NEW_TOKENS}; other values leave TRL out)")
    parser.add_argument("--rollyard-arg", action="append", default=[], metavar="FLAG",
                        help="extra `rollyard train` flag for both modes (repeatable)")
    parser.add_argument("--trl-venv", type=Path, default=HERE / ".trl-venv",
                        help="vs_trl.py's TRL venv; TRL is measured when it exists")
    parser.add_argument("--build-trl", action="store_true", help="build the TRL venv first")
    parser.add_argument("--trl-budget", type=float, default=30.0,
                        help="training seconds of each TRL run (default 30)")
    parser.add_argument("--trl-lr", type=float, default=vs_trl.TRL_LR,
                        help=f"TRL's learning rate (default vs_trl.py's, {vs_trl.TRL_LR:g})")
    parser.add_argument("--trl-threads", type=int, default=1,
                        help="torch threads of the TRL process (vs_trl.py's default, 1)")
    parser.add_argument("--quiet-wait", type=float, default=60.0, metavar="S",
                        help="before each run, wait up to S s until other processes use under "
                             "half a core (default 60; 0: don't wait)")
    parser.add_argument("--rollyard", default=str(vs_trl.REPO / ".venv" / "bin" / "rollyard"))
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter a TRL venv is built from")
    parser.add_argument("--out", type=Path, help="results folder (default "
                        "benchmarks/results/loop-<time>)")
    args = parser.parse_args(argv)
    if args.steps < 3 or args.rounds < 1:
        parser.error("--steps must be at least 3 and --rounds at least 1")
    out = (args.out or HERE / "results" / f"loop-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    vpy = None
    if args.build_trl:
        vpy = vs_trl.ensure_venv(args.trl_venv.resolve(), args.python)
    elif (args.trl_venv / "bin" / "python").exists():
        vpy = args.trl_venv.resolve() / "bin" / "python"
    if args.max_new_tokens != vs_trl.MAX_NEW_TOKENS:
        vpy = None
    model = out / "model"
    subprocess.run([args.rollyard, "init-model", str(model), "--seed", str(args.seed)],
                   check=True, stdout=subprocess.DEVNULL)

    results: dict[str, list[dict]] = {"sync": [], "async": [], "partial": [], "trl": []}
    modes = ["sync", "async", "partial"] if args.partial else ["sync", "async"]
    for round_ in range(args.rounds):
        order = modes if round_ % 2 == 0 else modes[::-1]
        for mode in order:
            results[mode].append(run_mode(args, mode, model, out, str(round_)))
            vs_trl.log(f"round {round_ + 1} {mode}: {results[mode][-1]['steps_per_s']:.2f} "
                       "steps/s")
        if vpy is not None:
            results["trl"].append(run_trl(args, vpy, model, out, str(round_)))
            vs_trl.log(f"round {round_ + 1} trl: {results['trl'][-1]['steps_per_s']:.2f} "
                       "steps/s")
    (out / "results.json").write_text(json.dumps(results, indent=1))

    print(f"\nloop: toy copy, {vs_trl.GROUPS} groups x {vs_trl.GROUP_SIZE} samples, "
          f"{args.max_new_tokens} new tokens, {args.steps} steps per run, {args.rounds} "
          "round(s); median (min-max) over rounds")
    print("| mode | steps/s | " + " | ".join(f"{k}_s" for k in TIMES) + " | reward last 10 |")
    print("|---" * (len(TIMES) + 3) + "|")
    for mode, runs in results.items():
        if not runs:
            continue
        cells = [spread([r[k] for r in runs]) if k in runs[0] else "-" for k in TIMES]
        print(f"| {mode} | {spread([r['steps_per_s'] for r in runs])} | " + " | ".join(cells)
              + f" | {spread([r['reward_last10'] for r in runs])} |")
    ratios = [a["steps_per_s"] / s["steps_per_s"]
              for a, s in zip(results["async"], results["sync"])]
    print(f"\nasync / sync steps/s, per round: {', '.join(f'{r:.2f}' for r in ratios)} "
          f"(median {statistics.median(ratios):.2f}; target >= 1.5)")
    if results["partial"]:
        partial = [p["steps_per_s"] / a["steps_per_s"]
                   for p, a in zip(results["partial"], results["async"])]
        print(f"async --partial-rollouts / async steps/s, per round: "
              f"{', '.join(f'{r:.2f}' for r in partial)} "
              f"(median {statistics.median(partial):.2f}); generations resumed: "
              f"{spread([r['resumed_rate'] for r in results['partial']])}")
    if results["trl"]:
        vs = [a["steps_per_s"] / t["steps_per_s"]
              for a, t in zip(results["async"], results["trl"])]
        print(f"rollyard async / TRL steps/s, per round: {', '.join(f'{r:.2f}' for r in vs)} "
              f"(median {statistics.median(vs):.2f}; target >= 1.5)")
    elif args.max_new_tokens != vs_trl.MAX_NEW_TOKENS:
        print("TRL not measured: --max-new-tokens differs from vs_trl.py's configuration")
    else:
        print(f"TRL not measured: no venv at {args.trl_venv} (--build-trl builds it)")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
