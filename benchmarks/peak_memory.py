"""Peak resident memory of each process of a real run: driver, trainer rank, embedded engine.

Runs ``scripts/demo-real.sh`` (SmolLM2-135M-Instruct on the arithmetic task, ``make
demo-real``'s settings) for ``--steps`` training steps with a short eval (``--eval-tasks``) at
step 0 and after the last step, through the real CLI, and polls every process the run starts:
each is found by a marker in its environment, which every process of the run inherits (the
Ray head runs in a session of its own, its workers are not the driver's children). A process's
peak is the kernel's ``VmHWM`` (peak resident set) at its last poll before it exits.

    .venv/bin/python benchmarks/peak_memory.py [--steps 2] [--eval-tasks 4] [--interval 0.2]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import uuid

import psutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARKER = "ROLLYARD_PEAK_MEMORY_RUN"
TRAINER = "trainer rank (Ray actor)"
#: megatron-core's checkpoint writer: a fork of the rank, under its title, sharing its pages
WRITER = "trainer's checkpoint writer"
#: (what a command line contains, the row it goes in), first match wins
ROLES = (("MegatronWorker", TRAINER),
         ("rollyard_plugins.embedded_engine", "embedded engine"),
         ("rollyard train", "driver (rollyard train)"),
         ("RolloutWorker", "rollout worker (Ray actor)"),
         ("rollyard report", "rollyard report"),
         ("raylet", "Ray: raylet"), ("gcs_server", "Ray: GCS"),
         ("ray::", "Ray: other workers"), ("ray", "Ray: other"))
#: the rows, most specific first (a writer is told from its rank by its parent)
ORDER = (TRAINER, WRITER, *(name for _, name in ROLES[1:]), "other")
#: the roles listed process by process
MAIN = (TRAINER, WRITER, "embedded engine", "driver (rollyard train)")


def role(cmdline: list[str]) -> str:
    text = " ".join(cmdline)  # the CLI runs as ``python .../bin/rollyard train ...``
    return next((name for key, name in ROLES if key in text), "other")


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Poller:
    """Every process carrying the run's marker: its role (the most specific one seen) and
    its last peak resident set."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.checked: dict[int, bool] = {}
        self.roles: dict[int, str] = {}
        self.commands: dict[int, str] = {}
        self.peaks: dict[int, float] = {}
        self.seen: dict[int, tuple[float, float]] = {}  # first and last poll, run seconds
        self.started = time.perf_counter()

    def poll(self) -> None:
        for proc in psutil.process_iter(["pid"]):
            pid = proc.info["pid"]
            try:
                if pid not in self.checked:
                    self.checked[pid] = proc.environ().get(MARKER) == self.tag
                if not self.checked[pid]:
                    continue
                cmdline = proc.cmdline()
                name = role(cmdline)
                if name == TRAINER and self.roles.get(proc.ppid()) == TRAINER:
                    name = WRITER
            except (psutil.Error, OSError):
                continue
            if pid not in self.roles or ORDER.index(name) < ORDER.index(self.roles[pid]):
                self.roles[pid] = name
                self.commands[pid] = " ".join(cmdline)
            peak = peak_rss_mib(pid)
            if peak is not None:
                self.peaks[pid] = max(peak, self.peaks.get(pid, 0.0))
                now = time.perf_counter() - self.started
                self.seen[pid] = (self.seen.get(pid, (now, now))[0], now)


def load_average() -> str:
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--eval-tasks", type=int, default=4)
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between polls")
    parser.add_argument("--venv", default=str(ROOT / ".venv"))
    args = parser.parse_args()
    tag = uuid.uuid4().hex
    print(f"load average before: {load_average()}")
    with tempfile.TemporaryDirectory(prefix="rollyard-peak-memory-") as runs:
        env = {**os.environ, MARKER: tag, "VENV": args.venv, "RUNS": runs, "NAME": "run"}
        command = ["bash", str(ROOT / "scripts" / "demo-real.sh"), "--steps", str(args.steps),
                   "--eval-tasks", str(args.eval_tasks), "--num-cpus", "2", "--no-progress"]
        poller = Poller(tag)
        started = time.perf_counter()
        with open(pathlib.Path(runs) / "run.log", "w") as log:
            process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log,
                                       stderr=subprocess.STDOUT)
            while process.poll() is None:
                poller.poll()
                time.sleep(args.interval)
        wall = time.perf_counter() - started
        if process.returncode != 0:
            print((pathlib.Path(runs) / "run.log").read_text()[-3000:], file=sys.stderr)
            print(f"demo-real.sh exited with {process.returncode}", file=sys.stderr)
            return 1
    print(f"{' '.join(command[1:])}: {wall:.0f} s wall")
    rows: dict[str, list[float]] = {}
    for pid, peak in poller.peaks.items():
        rows.setdefault(poller.roles[pid], []).append(peak)
    print(f"{'process':<28} {'count':>5} {'peak RSS MiB (largest)':>23} {'sum MiB':>8}")
    for name in ORDER:
        if name in rows:
            peaks = rows[name]
            print(f"{name:<28} {len(peaks):>5} {max(peaks):>23.0f} {sum(peaks):>8.0f}")
    for pid, peak in sorted(poller.peaks.items(), key=lambda kv: poller.seen[kv[0]]):
        if poller.roles[pid] in MAIN:
            first, last = poller.seen[pid]
            print(f"  pid {pid:>7} {poller.roles[pid]:<26} {peak:>7.0f} MiB, seen "
                  f"{first:.0f}-{last:.0f} s: {poller.commands[pid][:60]}")
    print("peak RSS: VmHWM, each process's own; shared pages count in each process")
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
