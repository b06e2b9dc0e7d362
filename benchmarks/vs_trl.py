"""rollyard versus Hugging Face TRL's GRPOTrainer: same model, task, batch and training time.

For each toy operation (copy, reverse) the benchmark runs ``rollyard train`` and then TRL's
``GRPOTrainer``, one after the other in this one command (wall time on shared machines varies
several-fold between hours, so never compare with a figure from another run), each for the same
training-time budget, and prints one table: steps, steps/s, best 3-step mean reward, reward at
the end, seconds to reach 0.3 and 0.5. It writes an overlay plot of both reward curves against
training wall time and every raw log into a results folder.

Usage::

    python benchmarks/vs_trl.py [--budget 240] [--ops copy,reverse] [--seeds 0] [--trl-lr 3e-3]
                                [--trl-lr-sweep 3e-4,1e-3,3e-3 [--sweep-budget S]]
                                [--rollyard-arg=--lr=1e-3 ...] [--frameworks rollyard,trl]
    make bench-trl ARGS="--budget 60"
    python benchmarks/vs_trl.py --model smollm2 [--budget 300] [--seed 0]

A real model (``--model smollm2`` or a model folder). SmolLM2-135M-Instruct (the folder
``rollyard models smollm2`` prints) on the arithmetic word problems, with the ``rollyard train``
flags of scripts/demo-real.sh, read from that script (group size 8, 4 prompts a step, 16 new
tokens, temperature 0.8, lr 3e-5, numbers up to 10, no resampling, eval on 100 held-out
problems at temperature 0 before the first step and after the last). rollyard runs with
``--max-seconds BUDGET``, which, as in the demo, counts its untrained eval; TRL then trains for
the training seconds rollyard actually had (its steps' time without eval time), its evals
outside that time. TRL (trl_side/run_trl.py ``--task arithmetic``) gets the problems restated
in trl_side/arithmetic_task.py (the plugin imports rollyard, which the TRL venv lacks), fed in
rollyard's task order, the same chat messages through the same tokenizer's chat template, the
same rewards (``arith-answer`` + 0.5 × ``arith-format``), the same batch, new tokens,
temperature and lr; its torch uses one thread per core (``--trl-threads``). Before and after
training it scores the same held-out problems by greedy ``generate`` with the plugin's
exact-answer check (the reply's last integer), 16 new tokens, stopping at the end-of-turn
token. The driver checks the restated problems against the plugin's own ``make_splits`` (both
splits) and against the rollyard run (tasks of each step, every sample's reward, prompt token
ids), and prints one table: pass@1 before and after, the gain, steps, training seconds,
samples/s and generation tokens/s (rollyard: ``response/tokens`` over ``time/rollout_s``; TRL:
completion tokens, the end-of-turn token included, over the time in its generation call),
with the ratios against the targets (eval gain ≥ 1.5× TRL's, tokens/s ≥ 2×).

Set-up. TRL lives in its own virtual environment, built on first use from pinned versions
(``torch==2.13.0`` CPU as in rollyard's, ``trl==1.16.0``, ``transformers==5.24.0``) under
``benchmarks/.trl-venv`` (``--venv``; rebuilt when the pins change), never in rollyard's. One tiny
model per seed is written with ``rollyard init-model --seed S`` and both frameworks start from
it. Nothing of rollyard is imported: it runs as ``rollyard train`` in a subprocess and is read
back from what that writes (``metrics.jsonl``, ``samples.jsonl``).

The task. rollyard: ``--rollout-plugin toy --toy-operation OP --groups-per-step 16 --group-size
8 --max-new-tokens 6 --model DIR --seed S`` and otherwise its defaults (``--rollyard-arg``
appends flags). TRL gets the same task restated in ``trl_side/toy_task.py``: the same words, the
same prompt stream (rollyard's seeded task sequence, fed with ``shuffle_dataset=False`` so TRL
step k sees rollyard step k's 16 prompts; groups rollyard draws on top by dynamic sampling come
from the same sequence, so from then on its prompts run ahead of TRL's), the same chat messages
``"<op>: <word>"`` rendered by TRL itself through the same tokenizer's chat template, and the
same reward: the sum of char-f1 and exact-match (rollyard's default weights 1 + 1, so 0..2; the
table also gives the best as a share of that maximum). The driver checks this against the
rollyard run (task ids of each step, every sample's reward recomputed from its completion, the
prompt token ids TRL tokenized against rollyard's) and prints the result under the table.

TRL settings: ``GRPOConfig(use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
use_vllm=False, per_device_train_batch_size=128, gradient_accumulation_steps=1,
num_generations=8, steps_per_generation=1, num_iterations=1, max_completion_length=6,
temperature=1.0, top_p=1.0, top_k=0, shuffle_dataset=False, learning_rate=LR,
lr_scheduler_type="constant", seed=S)`` and ``torch.set_num_threads(1)`` (``--trl-threads``):
one optimizer step per batch of 16 prompts × 8 completions, fp32, sampling as rollyard's
defaults. One thread because it is TRL's fastest setting here: with torch's default of one
thread per core, any other process on the machine stalls every op of this tiny model (1.1-3.2 s
per step against 0.17-0.26 s with one thread while another process used one core); on a quiet
machine two threads took 0.15-0.25 s, no faster. TRL turns bf16 and gradient checkpointing on
by default; both only slow a tiny fp32 model on CPU. Everything else is TRL's default GRPO
(``loss_type="dapo"``, ``scale_rewards="group"``, ``beta=0`` so no reference model,
``epsilon=0.2``, AdamW, ``max_grad_norm=1.0``). The learning rate defaults to 3e-3, the best of
the latest sweep (3e-4, 1e-3, 3e-3 on both ops, after the toy reward was corrected; 1e-3 won the
sweep over 3e-4 to 1e-2 on the earlier reward; benchmarks/RESULTS.md, "Against TRL");
``--trl-lr-sweep`` reruns such a sweep (each rate on every op for ``--sweep-budget`` seconds) and
gives TRL the rate with the highest mean best-3-step reward.

Time budget. Training time is wall time from the start of the first training step: TRL's is
measured by a callback from ``on_train_begin``, which stops training once the budget is spent;
rollyard's from the first ``metrics.jsonl`` line (its arrival time minus that step's
``time/step_s``), each later step at the moment its line appears. rollyard is stopped by
``--max-seconds`` when ``rollyard train`` has that flag, else by SIGINT once the budget is spent
(the table's notes say which). Start-up (Ray, engines, model loading) is excluded for both;
steps that end after the budget are dropped for both. Both share the machine's cores with
anything else running: before each run the driver waits (``--quiet-wait``, default at most
300 s) until other processes use under half a core, and the table's ``others`` column gives the
cores they kept busy during each run (measured from /proc: all CPU time minus the run's own
process tree); figures from runs with ``others`` above ~0.5 are not comparable.

Metrics. ``reward``: mean summed reward of a step's samples. ``best3``: the best mean of 3
consecutive steps. ``end``: mean of the last 3 steps. ``t>=X``: training seconds until the
3-step mean first reaches X (``-`` if never). One run is one draw: on these toy tasks two
runs of rollyard differ by up to ~0.15 in best3 (benchmarks/RESULTS.md), so ``--seeds 0,1,2`` runs
everything once per seed and adds a table of means, spreads and how many runs reached each
threshold (the TRL learning-rate sweep, if any, runs on the first seed). Results go to
``benchmarks/results/vs-trl-<time>`` (``--out``): ``results.json``, ``table.md``,
``reward_vs_time.png``, the runs and their logs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "trl_side"))

import arithmetic_task  # noqa: E402
import toy_task  # noqa: E402

TRL_PINS = ["trl==1.16.0", "transformers==5.24.0", "tokenizers", "datasets", "accelerate",
            "matplotlib", "torch==2.13.0"]
TORCH_PIN = "torch==2.13.0"
GROUPS, GROUP_SIZE, MAX_NEW_TOKENS = 16, 8, 6
#: TRL's learning rate unless a sweep picks one: the best of the last sweep (benchmarks/RESULTS.md)
TRL_LR = 3e-3
THRESHOLDS = (0.3, 0.5)
CHECK_STEPS = 30          # steps of the rollyard run whose tasks and rewards are re-checked
POLL_S = 0.05
START_TIMEOUT_S = 900.0   # rollyard: longest wait for its first step
STOP_GRACE_S = 60.0       # after SIGINT: wait this long before SIGTERM to its process group


def log(message: str) -> None:
    print(f"[vs_trl {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- set-up


def ensure_venv(venv: Path, python: str) -> Path:
    """The TRL virtual environment, built (about 2 minutes) when missing or stale."""
    stamp = venv / ".vs-trl-pins"
    wanted = " ".join([TORCH_PIN, *TRL_PINS])
    vpy = venv / "bin" / "python"
    if vpy.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return vpy
    log(f"building the TRL venv in {venv} ({wanted})")
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(vpy), "-m", "pip", "install", "-q"]
    # torch first, and named again with trl, so pip keeps the CPU build (no CUDA download)
    subprocess.run([*pip, TORCH_PIN], check=True)
    subprocess.run([*pip, *TRL_PINS], check=True)
    stamp.write_text(wanted + "\n")
    return vpy


def rollyard_has_max_seconds(rollyard: str) -> bool:
    help_text = subprocess.run([rollyard, "train", "--help"], capture_output=True, text=True,
                               check=True).stdout
    return re.search(r"--max-seconds\b", help_text) is not None


# --------------------------------------------------------------------------- runs


def toy_flags(op: str, seed: int, model: Path) -> list[str]:
    """The `rollyard train` flags of the toy comparison (with --steps, before --rollyard-arg)."""
    return ["--rollout-plugin", "toy", "--toy-operation", op,
            "--groups-per-step", str(GROUPS), "--group-size", str(GROUP_SIZE),
            "--max-new-tokens", str(MAX_NEW_TOKENS), "--model", str(model),
            "--seed", str(seed), "--steps", "1000000"]


def run_rollyard(args, name: str, flags: list[str], out: Path, max_seconds_flag: bool,
                 over: float = 30.0) -> dict:
    """``rollyard train FLAGS`` for ``args.budget`` s of training, its metrics rows read as
    they appear. ``over``: with --max-seconds, how long past the budget (from its first
    metrics row) before SIGINT stops it anyway (a run with a final eval needs longer)."""
    runs_dir = out / "rollyard-runs"
    run_dir = runs_dir / name
    cmd = [args.rollyard, "train", *flags, "--no-progress", "--runs-dir", str(runs_dir),
           "--name", name]
    if max_seconds_flag:
        cmd += ["--max-seconds", f"{args.budget:g}"]
    cmd += args.rollyard_arg
    wait_until_quiet(args.quiet_wait)
    log(f"rollyard: {shlex.join(cmd)}")
    metrics_file = run_dir / "metrics.jsonl"
    log_file = out / f"{name}.log"
    rows: list[dict] = []
    start = stopped_at = None
    stop = "--max-seconds" if max_seconds_flag else "SIGINT"
    launched = time.monotonic()
    with log_file.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO,
                                start_new_session=True)
        monitor, sampled = LoadMonitor(proc.pid), 0.0
        offset, pending = 0, ""
        try:
            while True:
                done = proc.poll() is not None
                now = time.monotonic()
                if now - sampled >= 1.0 and not done:
                    monitor.sample()
                    sampled = now
                if metrics_file.exists() and metrics_file.stat().st_size > offset:
                    with metrics_file.open() as mf:
                        mf.seek(offset)
                        chunk = mf.read()
                        offset = mf.tell()
                    pending += chunk
                    *lines, pending = pending.split("\n")
                    new = [json.loads(line) for line in lines if line.strip()]
                    # the last new line appeared now; earlier ones by their step times
                    for k, row in enumerate(new):
                        later = sum(r.get("time/step_s", 0.0) for r in new[k + 1:])
                        if start is None:
                            start = now - later - row.get("time/step_s", 0.0)
                        row["t"] = now - later - start
                        rows.append(row)
                if done:
                    break
                if start is None and now - launched > START_TIMEOUT_S:
                    raise RuntimeError(f"{name}: no training step after "
                                       f"{START_TIMEOUT_S:.0f} s; see {log_file}")
                over = over if max_seconds_flag else 0.0  # --max-seconds: a fallback only
                if start is not None and stopped_at is None \
                        and now - start >= args.budget + over:
                    if max_seconds_flag:
                        stop = "SIGINT (--max-seconds did not stop it)"
                    proc.send_signal(signal.SIGINT)
                    stopped_at = now
                if stopped_at is not None and now - stopped_at > STOP_GRACE_S:
                    log(f"{name}: still running {STOP_GRACE_S:.0f} s after SIGINT; "
                        "SIGTERM to its process group")
                    os.killpg(proc.pid, signal.SIGTERM)
                    stopped_at = float("inf")
                time.sleep(POLL_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    evals = [r for r in rows if "time/step_s" not in r]  # the untrained model's eval row
    rows = [r for r in rows if "time/step_s" in r]
    if not rows:
        raise RuntimeError(f"{name}: exited {proc.returncode} without a training step; "
                           f"see {log_file}:\n{tail(log_file)}")
    curve = [(r["t"], r["reward/mean"], r.get("reward/exact-match", 0.0)) for r in rows]
    lr = None
    given = [*flags, *args.rollyard_arg]
    for i, flag in enumerate(given):
        if flag.startswith("--lr="):
            lr = float(flag.split("=", 1)[1])
        elif flag == "--lr" and i + 1 < len(given):
            lr = float(given[i + 1])
    return {"framework": "rollyard", "lr": lr, "stop": stop,
            "returncode": proc.returncode, "run_dir": str(run_dir), "log": str(log_file),
            "others_cores": monitor.others_cores(),
            "all_steps": len(rows), "curve": curve, "rows": evals + rows,
            "last_entropy": rows[-1].get("train/entropy")}


def run_trl(args, vpy: Path, op: str, seed: int, model: Path, out: Path, lr: float,
            budget: float, tag: str, flags: list[str] | None = None) -> dict:
    """trl_side/run_trl.py for ``budget`` training seconds; ``flags``: its task and batch
    flags (default: the toy comparison's)."""
    jsonl = out / f"trl-{op}-s{seed}-{tag}.jsonl"
    log_file = out / f"trl-{op}-s{seed}-{tag}.log"
    if flags is None:
        flags = ["--operation", op, "--groups", str(GROUPS), "--group-size", str(GROUP_SIZE),
                 "--max-new-tokens", str(MAX_NEW_TOKENS)]
    cmd = [str(vpy), str(HERE / "trl_side" / "run_trl.py"), "--model", str(model), *flags,
           "--budget", f"{budget:g}", "--lr", f"{lr:g}", "--seed", str(seed),
           "--threads", str(args.trl_threads), "--out", str(jsonl)]
    wait_until_quiet(args.quiet_wait)
    log(f"TRL {op} seed {seed} lr={lr:g} budget={budget:g}s: {shlex.join(cmd)}")
    with log_file.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO,
                                start_new_session=True)
        monitor, deadline = LoadMonitor(proc.pid), time.monotonic() + budget + START_TIMEOUT_S
        try:
            while proc.poll() is None:
                monitor.sample()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"TRL {op}: still running {START_TIMEOUT_S:.0f} s after "
                                       f"its budget; see {log_file}")
                time.sleep(1.0)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"TRL {op}: exited {proc.returncode}; see {log_file}:\n"
                           f"{tail(log_file)}")
    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    curve = [(r["t"], r["reward"], r.get("reward/exact-match") or 0.0) for r in rows]
    return {"framework": "trl", "op": op, "seed": seed, "lr": lr, "stop": "callback",
            "returncode": 0, "run_dir": str(jsonl), "log": str(log_file),
            "others_cores": monitor.others_cores(),
            "all_steps": len(rows), "curve": curve, "rows": rows,
            "prompts_file": f"{jsonl}.prompts.json", "eval_file": f"{jsonl}.eval.json",
            "last_entropy": rows[-1].get("entropy") if rows else None}


def tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def toy_steps_per_s(rollyard: str, name: str, flags: list[str], model: Path, out: Path,
                    steps: int, quiet_wait: float) -> float:
    """Steps/s of one ``rollyard train`` run on the benchmarks' toy configuration (16 groups
    × 8 samples, 6 new tokens, seed 0) with ``flags`` on top, over its steps after the first
    (from ``time/elapsed_s``); the sibling benchmarks (mixing, remote backend) compare these."""
    cmd = [rollyard, "train", *flags, "--groups-per-step", str(GROUPS),
           "--group-size", str(GROUP_SIZE), "--max-new-tokens", str(MAX_NEW_TOKENS),
           "--model", str(model), "--seed", "0", "--steps", str(steps), "--no-progress",
           "--runs-dir", str(out / "runs"), "--name", name]
    wait_until_quiet(quiet_wait)
    log_file = out / f"{name}.log"
    with log_file.open("w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} exited {proc.returncode}:\n{tail(log_file)}")
    rows = [json.loads(line) for line in
            (out / "runs" / name / "metrics.jsonl").read_text().splitlines()]
    return (len(rows) - 1) / (rows[-1]["time/elapsed_s"] - rows[0]["time/elapsed_s"])


# --------------------------------------------------------------------------- machine load

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_ticks() -> int:
    """CPU ticks spent busy, all cores together, since boot (/proc/stat)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return user + nice + system + irq + softirq + steal


def process_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, CPU ticks of the process and its reaped children)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            rest = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(entry.name)] = (int(rest[1]), sum(map(int, rest[11:15])))
    return table


class LoadMonitor:
    """How many cores processes other than a run's own process tree kept busy during it."""

    def __init__(self, root: int) -> None:
        self.root, self.own = root, {}
        self.busy0, self.t0 = busy_ticks(), time.monotonic()

    def sample(self) -> None:
        table = process_table()
        family, frontier = {self.root}, [self.root]
        children: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        while frontier:
            for child in children.get(frontier.pop(), []):
                if child not in family:
                    family.add(child)
                    frontier.append(child)
        for pid in family & table.keys():
            self.own[pid] = max(self.own.get(pid, 0), table[pid][1])

    def others_cores(self) -> float:
        elapsed = time.monotonic() - self.t0
        others = busy_ticks() - self.busy0 - sum(self.own.values())
        return max(0.0, others / TICKS / elapsed) if elapsed > 0 else 0.0


def wait_until_quiet(max_wait: float, threshold: float = 0.5, window: float = 3.0) -> float:
    """Wait (at most ``max_wait`` s) until other processes use under ``threshold`` cores over
    ``window`` s; returns the cores they used in the last window."""
    if max_wait <= 0:
        return 0.0
    deadline = time.monotonic() + max_wait
    said = False
    while True:
        before = busy_ticks()
        time.sleep(window)
        cores = (busy_ticks() - before) / TICKS / window
        if cores < threshold or time.monotonic() >= deadline:
            return cores
        if not said:
            log(f"other processes keep {cores:.1f} cores busy; waiting up to {max_wait:.0f} s "
                "for a quieter machine (--quiet-wait)")
            said = True


# --------------------------------------------------------------------------- analysis


def summarize(run: dict, budget: float) -> dict:
    curve = [p for p in run["curve"] if p[0] <= budget]
    run["curve"] = curve
    rewards = [p[1] for p in curve]
    means3 = [sum(rewards[i - 2:i + 1]) / 3 for i in range(2, len(rewards))]
    reach = {}
    for level in THRESHOLDS:
        hit = next((curve[i + 2][0] for i, m in enumerate(means3) if m >= level), None)
        reach[f"{level:g}"] = hit
    last_t = curve[-1][0] if curve else 0.0
    run.update({
        "steps": len(curve),
        "steps_per_s": len(curve) / last_t if last_t else 0.0,
        "best3": max(means3) if means3 else None,
        "end3": sum(rewards[-3:]) / len(rewards[-3:]) if rewards else None,
        "end3_exact": (sum(p[2] for p in curve[-3:]) / len(curve[-3:])) if curve else None,
        "reach": reach,
    })
    return run


def check_against_rollyard(rollyard_run: dict, trl_run: dict | None, where: str,
                           sequence_of: Callable[[int], list[dict]],
                           total_reward: Callable[[str, str], float],
                           per_step: int = GROUPS) -> list[str]:
    """Compare the task restated in trl_side/ and TRL's prompt ids with what rollyard did.

    rollyard draws its groups from one seeded task sequence (``sequence_of(n)``: its first n
    tasks), ``per_step`` per step plus any it resamples (dynamic sampling); TRL is fed the same
    sequence ``per_step`` per step. So the tasks of rollyard's steps 1..k must be the first n_k
    of the sequence, n_k being the groups it drew so far."""
    notes = []
    samples_file = Path(rollyard_run["run_dir"]) / "samples.jsonl"
    if not samples_file.exists():
        return [f"{where}: no samples.jsonl in the rollyard run; task and reward not checked"]
    groups: dict[int, dict[str, str]] = {}
    prompt_ids: dict[str, list[int]] = {}
    checked_samples: list[tuple[str, str, float]] = []
    with samples_file.open() as fh:
        for line in fh:
            sample = json.loads(line)
            if sample["step"] > CHECK_STEPS:
                break
            groups.setdefault(sample["step"], {})[sample["group_id"]] = sample["task_id"]
            prompt_ids[sample["task_id"]] = sample["tokens"][:sample["prompt_len"]]
            if sample["status"] in ("completed", "truncated"):
                checked_samples.append((str(sample.get("completion") or ""),
                                        sample["task_id"], sample["reward"]))
    steps = sorted(groups)
    drawn = sum(len(groups[s]) for s in steps)
    sequence = sequence_of(max(drawn, per_step * CHECK_STEPS))
    answers = {t["id"]: t["answer"] for t in sequence}
    seen: Counter = Counter()
    same_tasks = True
    for s in steps:
        seen.update(groups[s].values())
        same_tasks &= seen == Counter(t["id"] for t in sequence[:sum(seen.values())])
    extra = drawn - per_step * len(steps)
    notes.append(f"{where}: the tasks of rollyard's steps 1-{len(steps)} "
                 f"{'are' if same_tasks else 'are NOT'} the task sequence TRL was fed"
                 + (f" (rollyard drew {extra} extra groups by resampling, so its prompts run "
                    "ahead of TRL's)" if extra else " (step for step)"))
    bad = sum(abs(total_reward(c, answers.get(t, "\0")) - r) > 1e-9
              for c, t, r in checked_samples)
    notes.append(f"{where}: rewards of {len(checked_samples)} rollyard samples recomputed with "
                 f"TRL's reward functions: {'all equal' if not bad else f'{bad} DIFFER'}")
    if trl_run and Path(trl_run["prompts_file"]).exists():
        trl_prompts = json.loads(Path(trl_run["prompts_file"]).read_text())
        fed = sequence_of(per_step * len(trl_prompts))
        stream = [fed[i:i + per_step] for i in range(0, len(fed), per_step)]
        compared = differ = 0
        for ids, tasks in zip(trl_prompts, stream):
            for got, task in zip(ids, tasks):
                if task["id"] in prompt_ids:
                    compared += 1
                    differ += got != prompt_ids[task["id"]]
        notes.append(f"{where}: prompt token ids TRL built for {compared} prompts of its first "
                     f"{len(trl_prompts)} steps: "
                     + (f"{differ} DIFFER from" if differ else "equal to") + " rollyard's")
    return notes


def fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def markdown(head: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                      *("| " + " | ".join(cells) + " |" for cells in rows)])


def table(runs: list[dict]) -> str:
    head = ["framework", "op", "seed", "lr", "steps", "steps/s", "best3", "best3/max", "end",
            "exact@end", *(f"t>={level:g} (s)" for level in THRESHOLDS), "others"]
    rows = []
    for r in runs:
        cells = [r["framework"], r["op"], str(r["seed"]),
                 "default" if r["lr"] is None else f"{r['lr']:g}",
                 str(r["steps"]), fmt(r["steps_per_s"], ".2f"), fmt(r["best3"]),
                 fmt(None if r["best3"] is None else r["best3"] / toy_task.REWARD_MAX),
                 fmt(r["end3"]), fmt(r["end3_exact"]),
                 *(fmt(r["reach"][f"{level:g}"], ".0f") for level in THRESHOLDS),
                 fmt(r.get("others_cores"), ".2f")]
        rows.append(cells)
    return markdown(head, rows)


def mean_table(runs: list[dict]) -> str:
    """One row per framework and op over its seeds: means, the spread of best3, and in how
    many runs the 3-step mean reached each threshold."""
    head = ["framework", "op", "runs", "steps/s", "best3 mean", "best3 min-max", "end mean",
            *(f"reached {level:g}" for level in THRESHOLDS)]
    rows = []
    for key in dict.fromkeys((r["framework"], r["op"]) for r in runs):
        group = [r for r in runs if (r["framework"], r["op"]) == key]
        best = [r["best3"] for r in group if r["best3"] is not None]
        ends = [r["end3"] for r in group if r["end3"] is not None]
        rows.append([*key, str(len(group)),
                     fmt(sum(r["steps_per_s"] for r in group) / len(group), ".2f"),
                     fmt(sum(best) / len(best) if best else None),
                     f"{fmt(min(best))}-{fmt(max(best))}" if best else "-",
                     fmt(sum(ends) / len(ends) if ends else None),
                     *(f"{sum(r['reach'][f'{level:g}'] is not None for r in group)}"
                       f"/{len(group)}" for level in THRESHOLDS)])
    return markdown(head, rows)


# --------------------------------------------------------------------------- a real model

DEMO_REAL = REPO / "scripts" / "demo-real.sh"


def demo_real_flags(script: Path = DEMO_REAL) -> list[str]:
    """The fixed flags of the ``rollyard train`` command in scripts/demo-real.sh (those set
    from shell variables, such as --model, --seed and --max-seconds, left out): the real-model
    comparison trains with exactly these."""
    text = script.read_text().replace("\\\n", " ")
    line = next((ln for ln in text.splitlines() if re.search(r'rollyard"? train ', ln)), None)
    if line is None:
        raise RuntimeError(f"{script}: no `rollyard train` command found")
    words = shlex.split(line.split(" train ", 1)[1])
    flags: list[str] = []
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") \
            else None
        if value is None:
            flags.append(word)
        elif "$" not in value:
            flags += [word, value]
    return flags


def flag_value(flags: list[str], name: str, default: str | None = None) -> str | None:
    return flags[flags.index(name) + 1] if name in flags else default


def model_folder(args) -> Path:
    """``--model``: ``smollm2`` (the folder `rollyard models smollm2` prints, imported once)
    or a Hugging Face model folder."""
    if args.model == "smollm2":
        found = subprocess.run([args.rollyard, "models", "smollm2"], capture_output=True,
                               text=True, cwd=REPO)
        if found.returncode != 0:
            raise SystemExit(f"--model smollm2: `rollyard models smollm2` failed: "
                             f"{found.stderr.strip().splitlines()[-1:]}")
        folder = Path(found.stdout.strip().splitlines()[-1])
    else:
        folder = Path(args.model)
    if not (folder / "config.json").exists():
        raise SystemExit(f"--model {args.model}: {folder} has no config.json")
    return folder.resolve()


def plugin_splits(args, num_train: int, num_eval: int, high: int, seed: int) -> dict:
    """rollyard's own arithmetic splits, from its plugin in rollyard's venv."""
    code = ("import json, sys\n"
            "from rollyard_plugins.arithmetic import make_splits\n"
            "a = [int(x) for x in sys.argv[1:]]\n"
            "splits = make_splits(a[0], a[1], a[2], seed=a[3])\n"
            "print(json.dumps({k: [{'id': t.id, 'prompt': list(t.prompt), "
            "'answer': t.data['answer']} for t in v] for k, v in splits.items()}))")
    python = Path(args.rollyard).parent / "python"
    done = subprocess.run([str(python), "-c", code, str(num_train), str(num_eval), str(high),
                           str(seed)], capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(done.stdout)


def rollyard_figures(run: dict) -> dict:
    """Eval before/after, steps, training seconds (eval time left out), samples/s and rollout
    tokens/s of a rollyard run, from its metrics rows."""
    rows = [r for r in run["rows"] if "time/step_s" in r]
    evals = [r for r in run["rows"] if "eval/pass@1" in r]
    train_s = sum(r["time/step_s"] - r.get("time/eval_s", 0.0) for r in rows)
    rollout_s = sum(r["time/rollout_s"] for r in rows)
    return {"before": evals[0]["eval/pass@1"] if evals else None,
            "after": evals[-1]["eval/pass@1"] if len(evals) > 1 else None,
            "eval_steps": [r["step"] for r in evals], "steps": len(rows), "train_s": train_s,
            "samples_per_s": sum(r["samples/count"] for r in rows) / train_s,
            "gen_tokens_per_s": sum(r["response/tokens"] for r in rows) / rollout_s,
            "gen_share": rollout_s / train_s,
            "reward_end3": sum(r["reward/mean"] for r in rows[-3:]) / len(rows[-3:])}


def trl_figures(run: dict, batch: int) -> dict:
    """The same figures of a TRL run, from run_trl.py's step rows and eval file."""
    rows = run["rows"]
    scores = json.loads(Path(run["eval_file"]).read_text())
    train_s = rows[-1]["t"]
    gen_s = sum(r["gen_s"] for r in rows)
    return {"before": scores["before"]["pass@1"], "after": scores["after"]["pass@1"],
            "eval_steps": [0, len(rows)], "steps": len(rows), "train_s": train_s,
            "samples_per_s": batch * len(rows) / train_s,
            "gen_tokens_per_s": sum(r["gen_tokens"] for r in rows) / gen_s,
            "gen_share": gen_s / train_s,
            "reward_end3": sum(r["reward"] for r in rows[-3:]) / len(rows[-3:]),
            "eval_s": [scores["before"]["seconds"], scores["after"]["seconds"]]}


def real_table(figures: dict[str, dict], others: dict[str, float | None]) -> str:
    head = ["framework", "pass@1 before", "pass@1 after", "gain (points)", "steps",
            "training s", "samples/s", "generation tokens/s", "generation share", "others"]
    rows = []
    for name, f in figures.items():
        gain = None if f["after"] is None else 100 * (f["after"] - f["before"])
        rows.append([name, fmt(f["before"], ".2f"), fmt(f["after"], ".2f"), fmt(gain, "+.0f"),
                     str(f["steps"]), f"{f['train_s']:.0f}", f"{f['samples_per_s']:.2f}",
                     f"{f['gen_tokens_per_s']:.0f}", f"{f['gen_share']:.0%}",
                     fmt(others.get(name), ".2f")])
    return markdown(head, rows)


def main_real(args, seed: int, out: Path, vpy: Path) -> int:
    """rollyard (scripts/demo-real.sh's settings) against TRL on a real model: the arithmetic
    task, eval pass@1 before and after on the same held-out problems, equal training time."""
    model = model_folder(args)
    demo = demo_real_flags()
    groups = int(flag_value(demo, "--groups-per-step"))
    group_size = int(flag_value(demo, "--group-size"))
    high = int(flag_value(demo, "--arithmetic-max-number", "20"))
    num_train = int(flag_value(demo, "--arithmetic-num-tasks",
                               str(arithmetic_task.DEFAULT_NUM_TASKS)))
    num_eval = int(flag_value(demo, "--arithmetic-eval-tasks",
                              str(arithmetic_task.DEFAULT_EVAL_TASKS)))
    eval_tasks = int(flag_value(demo, "--eval-tasks", str(num_eval)))
    lr = float(flag_value(demo, "--lr"))
    notes = [f"model {model}; rollyard flags from {DEMO_REAL.relative_to(REPO)}: "
             f"{shlex.join(demo)}"]

    splits = arithmetic_task.make_splits(num_train, num_eval, high, seed)
    same = splits == plugin_splits(args, num_train, num_eval, high, seed)
    notes.append(f"trl_side/arithmetic_task.py's {num_train} training and {num_eval} eval "
                 f"problems {'are' if same else 'are NOT'} the arithmetic plugin's (seed {seed})")

    name = f"rollyard-arithmetic-s{seed}"
    flags = ["--model", str(model), "--seed", str(seed), *demo]
    ry = run_rollyard(args, name, flags, out, True, over=START_TIMEOUT_S)
    ours = rollyard_figures(ry)
    notes.append(f"rollyard: stopped by {ry['stop']} (exit {ry['returncode']}); eval rows at "
                 f"steps {ours['eval_steps']}; --max-seconds {args.budget:g} counts the "
                 f"untrained eval, so {ours['train_s']:.0f} s of it were training")
    trl_flags = ["--task", "arithmetic", "--arithmetic-max-number", str(high),
                 "--num-tasks", str(num_train), "--arithmetic-eval-tasks", str(num_eval),
                 "--eval-tasks", str(eval_tasks), "--groups", str(groups),
                 "--group-size", str(group_size),
                 "--max-new-tokens", flag_value(demo, "--max-new-tokens"),
                 "--temperature", flag_value(demo, "--temperature", "1.0")]
    trl = run_trl(args, vpy, "arithmetic", seed, model, out, lr, ours["train_s"], "main",
                  trl_flags)
    theirs = trl_figures(trl, groups * group_size)
    notes.append(f"TRL: the same {ours['train_s']:.0f} training seconds; greedy evals took "
                 f"{theirs['eval_s'][0]:.0f} s and {theirs['eval_s'][1]:.0f} s, outside them")

    def sequence_of(n: int) -> list[dict]:
        return toy_task.TaskCycle(splits["train"], seed).take(n)

    notes.extend(check_against_rollyard(ry, trl, f"arithmetic seed {seed}", sequence_of,
                                        arithmetic_task.total_reward, groups))
    figures = {"rollyard": ours, "trl": theirs}
    gains = {k: None if f["after"] is None else f["after"] - f["before"]
             for k, f in figures.items()}
    gain_ratio = (gains["rollyard"] / gains["trl"] if gains["trl"] and gains["trl"] > 0
                  and gains["rollyard"] is not None else None)
    speed = ours["gen_tokens_per_s"] / theirs["gen_tokens_per_s"]
    notes.append("eval gain rollyard / TRL: " + (
        f"{gain_ratio:.2f}" if gain_ratio is not None else
        f"- (TRL's gain is {100 * gains['trl']:+.0f} points)") + " (target >= 1.5); "
        f"generation tokens/s rollyard / TRL: {speed:.2f} (target >= 2)")
    results = {"model": str(model), "budget": args.budget, "seed": seed, "lr": lr,
               "demo_flags": demo, "figures": figures, "gain_ratio": gain_ratio,
               "tokens_per_s_ratio": speed, "notes": notes,
               "runs": [{k: v for k, v in r.items() if k != "rows"} for r in (ry, trl)]}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    text = (f"rollyard vs TRL GRPOTrainer on {model.name}, arithmetic (numbers up to {high}), "
            f"seed {seed}: {groups} prompts x {group_size} completions a step, lr {lr:g}; "
            f"pass@1 at temperature 0 on {eval_tasks} held-out problems before and after; "
            "training s: eval time left out; generation share: of the training time; others: "
            "cores kept busy by other processes during the run\n\n"
            + real_table(figures, {"rollyard": ry["others_cores"],
                                   "trl": trl["others_cores"]}) + "\n\n"
            + "\n".join(f"- {n}" for n in notes) + "\n")
    (out / "table.md").write_text(text)
    print("\n" + text)
    print(f"results: {out}")
    return 0


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="rollyard vs TRL GRPOTrainer on the toy tasks, same training-time budget",
        epilog="TRL settings and the time-budget rules: see this file's docstring.")
    parser.add_argument("--budget", type=float, default=240.0,
                        help="training seconds per framework and op (default 240)")
    parser.add_argument("--ops", default="copy,reverse", help="toy operations (default both)")
    parser.add_argument("--frameworks", default="rollyard,trl",
                        help="which to run (default both)")
    parser.add_argument("--trl-lr", type=float, default=TRL_LR,
                        help=f"TRL learning rate when there is no sweep (default {TRL_LR:g})")
    parser.add_argument("--trl-threads", type=int,
                        help="torch threads of the TRL process (default 1 on the toy tasks, "
                             "0 with --model; 0: one per core)")
    parser.add_argument("--model", metavar="smollm2|DIR",
                        help="a real model instead of the toy tasks: the arithmetic task with "
                             "scripts/demo-real.sh's settings, eval before and after "
                             "(smollm2: the folder `rollyard models smollm2` prints)")
    parser.add_argument("--trl-lr-sweep", metavar="LR,LR,...",
                        help="run TRL at each rate on every op first and use the best")
    parser.add_argument("--sweep-budget", type=float,
                        help="seconds per sweep run (default: --budget; then the chosen "
                             "rate's sweep runs are the TRL results)")
    parser.add_argument("--rollyard-arg", action="append", default=[], metavar="FLAG",
                        help="extra `rollyard train` flag (repeatable; --rollyard-arg=--lr=1e-3)")
    parser.add_argument("--quiet-wait", type=float, default=300.0, metavar="S",
                        help="before each run, wait up to S s until other processes use under "
                             "half a core (default 300; 0: don't wait)")
    parser.add_argument("--seeds", "--seed", dest="seeds", default="0", metavar="SEED,...",
                        help="run every op and framework once per seed (its own model from "
                             "`rollyard init-model --seed`, task order and sampling); with "
                             "several, a table of means over the seeds follows (default 0)")
    parser.add_argument("--rollyard", default=str(REPO / ".venv" / "bin" / "rollyard"),
                        help="the rollyard executable (default: the project's .venv)")
    parser.add_argument("--venv", type=Path, default=HERE / ".trl-venv",
                        help="where the TRL venv is built and cached")
    parser.add_argument("--python", default=shutil.which("python3.11") or sys.executable,
                        help="interpreter the TRL venv is built from")
    parser.add_argument("--out", type=Path, help="results folder (default "
                        "benchmarks/results/vs-trl-<time>)")
    args = parser.parse_args(argv)
    ops = [op.strip() for op in args.ops.split(",") if op.strip()]
    frameworks = {f.strip() for f in args.frameworks.split(",") if f.strip()}
    if not ops or set(ops) - set(toy_task.OPERATIONS):
        parser.error(f"--ops: choose from {sorted(toy_task.OPERATIONS)}")
    if not frameworks or frameworks - {"rollyard", "trl"}:
        parser.error("--frameworks: rollyard, trl or both")
    if args.budget <= 0:
        parser.error("--budget must be positive")
    try:
        seeds = list(dict.fromkeys(int(seed) for seed in args.seeds.split(",")))
    except ValueError:
        parser.error(f"--seeds: comma-separated integers, got {args.seeds!r}")
    sweep = [float(x) for x in args.trl_lr_sweep.split(",")] if args.trl_lr_sweep else []
    sweep_budget = args.sweep_budget or args.budget
    if not Path(args.rollyard).exists():
        parser.error(f"{args.rollyard} not found: run `make install` first (or --rollyard)")
    args.rollyard = str(Path(args.rollyard).resolve())

    out = (args.out or HERE / "results" / f"vs-trl-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.venv = args.venv.resolve()
    vpy = ensure_venv(args.venv, args.python) if "trl" in frameworks else None
    if args.trl_threads is None:
        args.trl_threads = 0 if args.model else 1
    if args.model:
        if frameworks != {"rollyard", "trl"} or sweep:
            parser.error("--model runs both frameworks once; no --frameworks or --trl-lr-sweep")
        return main_real(args, seeds[0], out, vpy)
    models = {seed: out / f"model-s{seed}" for seed in seeds}
    for seed, model in models.items():
        if not (model / "config.json").exists():
            subprocess.run([args.rollyard, "init-model", str(model), "--seed", str(seed)],
                           check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    max_seconds_flag = "rollyard" in frameworks and rollyard_has_max_seconds(args.rollyard)

    notes: list[str] = []
    lr, sweep_runs = args.trl_lr, {}
    if "trl" in frameworks and sweep:  # on the first seed
        for rate in sweep:
            for op in ops:
                sweep_runs[(rate, op)] = summarize(
                    run_trl(args, vpy, op, seeds[0], models[seeds[0]], out, rate, sweep_budget,
                            f"sweep-{rate:g}"), sweep_budget)

        def score(rate: float) -> float:
            return sum(sweep_runs[(rate, op)]["best3"] or 0.0 for op in ops) / len(ops)

        lr = max(sweep, key=score)
        print(f"\nTRL learning-rate sweep ({sweep_budget:g} s per run):")
        print(table([sweep_runs[(rate, op)] for rate in sweep for op in ops]))
        notes.append(f"TRL lr {lr:g}: best mean best3 of the sweep {sweep} "
                     f"({sweep_budget:g} s per run, seed {seeds[0]})")
    else:
        notes.append(f"TRL lr {lr:g} (--trl-lr; no sweep in this run)")

    runs = []
    for seed, op in ((seed, op) for seed in seeds for op in ops):
        ry = trl = None
        where = f"{op} seed {seed}"
        if "rollyard" in frameworks:
            ry = run_rollyard(args, f"rollyard-{op}-s{seed}", toy_flags(op, seed, models[seed]),
                              out, max_seconds_flag)
            ry.update(op=op, seed=seed)
            ry = summarize(ry, args.budget)
            runs.append(ry)
            notes.append(f"rollyard {where}: stopped by {ry['stop']} (exit "
                         f"{ry['returncode']}), {ry['all_steps']} steps logged, {ry['steps']} "
                         "within the budget")
        if "trl" in frameworks:
            if (lr, op) in sweep_runs and sweep_budget == args.budget and seed == seeds[0]:
                trl = sweep_runs[(lr, op)]
            else:
                trl = summarize(run_trl(args, vpy, op, seed, models[seed], out, lr,
                                        args.budget, "main"), args.budget)
            runs.append(trl)
        if ry is not None:
            def toy_sequence(n: int, op: str = op, seed: int = seed) -> list[dict]:
                return toy_task.TaskCycle(toy_task.train_tasks(op, seed), seed).take(n)

            notes.extend(check_against_rollyard(ry, trl, where, toy_sequence,
                                                toy_task.total_reward))
        for run in (ry, trl):
            if run is None or not run["curve"]:
                continue
            step_times = sorted(b[0] - a[0] for a, b in zip(run["curve"], run["curve"][1:]))
            typical = step_times[len(step_times) // 2] if step_times else 0.0
            if run["curve"][-1][0] < args.budget - max(5.0, 3 * typical):
                notes.append(f"{run['framework']} {where}: its last step ended at "
                             f"{run['curve'][-1][0]:.0f} s, before the {args.budget:g} s budget")
            if (run.get("others_cores") or 0.0) > 0.5:
                notes.append(f"{run['framework']} {where}: other processes kept "
                             f"{run['others_cores']:.1f} cores busy during the run; its "
                             "time-based figures are disturbed")
            if run.get("last_entropy") is not None:
                notes.append(f"{run['framework']} {where}: entropy at the last step "
                             f"{run['last_entropy']:.3f}")

    results = {"budget": args.budget, "ops": ops, "groups": GROUPS, "group_size": GROUP_SIZE,
               "max_new_tokens": MAX_NEW_TOKENS, "seeds": seeds, "trl_lr": lr,
               "reward_max": toy_task.REWARD_MAX, "thresholds": list(THRESHOLDS),
               "rollyard_args": args.rollyard_arg, "notes": notes, "runs": runs,
               "sweep": [{k: v for k, v in r.items() if k != "curve"}
                         for r in sweep_runs.values()]}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    text = (f"rollyard vs TRL GRPOTrainer: {args.budget:g} s training each, {GROUPS} prompts x "
            f"{GROUP_SIZE} completions, {MAX_NEW_TOKENS} new tokens; reward = char-f1 + "
            f"exact-match (0..{toy_task.REWARD_MAX:g}), best3/max = best3 / "
            f"{toy_task.REWARD_MAX:g}; t>=X on the 3-step mean; others: cores kept busy by "
            f"other processes during the run (0 on a quiet machine)"
            + (f"; rollyard flags added: {shlex.join(args.rollyard_arg)}"
               if args.rollyard_arg else "") + f"\n\n{table(runs)}\n\n"
            + (f"Over the seeds {', '.join(map(str, seeds))}:\n\n{mean_table(runs)}\n\n"
               if len(seeds) > 1 else "")
            + "\n".join(f"- {n}" for n in notes) + "\n")
    (out / "table.md").write_text(text)
    print("\n" + text)
    plot = out / "reward_vs_time.png"
    plotter = vpy or args.venv / "bin" / "python"
    if plotter.exists():
        done = subprocess.run([str(plotter), str(HERE / "trl_side" / "plot.py"),
                               str(out / "results.json"), str(plot)], cwd=REPO)
        if done.returncode == 0:
            print(f"plot: {plot}")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
