"""What the remote rollout backend costs: steps/s of the toy run through two local
``rollyard env-server`` processes (``--rollout-backend remote``) against the same run on the
in-process Ray pool, side by side in one run.

Both runs are the toy copy task, 16 groups × 8 samples, 6 new tokens, on the tiny model with
the embedded engine; the servers take a token, as a real deployment would. Each round runs
both, alternating which goes first because the machine is shared; a run's steps/s is taken
over its steps after the first, from ``time/elapsed_s``. The HTTP overhead per group is the
difference of the two step times divided by the groups of a step. Target: remote at ≥ 0.9 of
the Ray pool's steps/s.

Usage::

    python benchmarks/remote_backend.py [--steps 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import vs_trl  # noqa: E402

TOY = ["--rollout-plugin", "toy", "--toy-operation", "copy"]


class EnvServers:
    """``count`` env servers of the toy plugin on free ports, until ``stop``."""

    def __init__(self, rollyard: str, token_file: Path, out: Path, count: int = 2) -> None:
        self.processes, self.urls = [], []
        for n in range(count):
            log = out / f"env-server-{n}.log"
            process = subprocess.Popen([rollyard, "env-server", *TOY, "--port", "0",
                                        "--token-file", str(token_file)],
                                       stderr=log.open("w"), stdout=subprocess.DEVNULL)
            self.processes.append(process)
            deadline = time.monotonic() + 60
            while not (found := re.search(r"on (http://\S+)", log.read_text())):
                if process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"env server {n} did not start:\n{log.read_text()}")
                time.sleep(0.1)
            self.urls.append(found.group(1))

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
            process.wait(30)


def run_one(args: argparse.Namespace, kind: str, backend: list[str], model: Path, out: Path,
            tag: str) -> float:
    """Steps/s of one ``rollyard train`` run with the rollout backend flags ``backend``."""
    return vs_trl.toy_steps_per_s(args.rollyard, f"{kind}-{tag}", [*TOY, *backend], model,
                                  out, args.steps, args.quiet_wait)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/rollyard-bench-remote"))
    parser.add_argument("--quiet-wait", type=float, default=30.0,
                        help="seconds to wait for the machine to go quiet before each run")
    parser.add_argument("--rollyard", default=str(Path(sys.executable).parent / "rollyard"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    token_file = args.out / "token"
    token_file.write_text("benchmark-token\n")
    model = args.out / "model"
    if not (model / "config.json").exists():
        subprocess.run([args.rollyard, "init-model", str(model), "--seed", "0"], check=True)
    servers = EnvServers(args.rollyard, token_file, args.out)
    backends = {"ray": [],
                "remote": ["--rollout-backend", "remote", "--env-server", ",".join(servers.urls),
                           "--env-token-file", str(token_file)]}
    results: dict[str, list[float]] = {"ray": [], "remote": []}
    try:
        for round_ in range(args.rounds):
            order = ["ray", "remote"] if round_ % 2 == 0 else ["remote", "ray"]
            for kind in order:
                results[kind].append(run_one(args, kind, backends[kind], model, args.out,
                                             str(round_)))
                print(f"round {round_ + 1} {kind}: {results[kind][-1]:.3f} steps/s",
                      flush=True)
    finally:
        servers.stop()
    ray, remote = (statistics.fmean(results[k]) for k in ("ray", "remote"))
    print("| backend | steps/s (mean of rounds) | rounds |")
    print("|---|---|---|")
    for kind, mean in (("ray (in-process pool)", ray), ("remote (2 env servers)", remote)):
        key = kind.split()[0]
        print(f"| {kind} | {mean:.3f} | {', '.join(f'{v:.3f}' for v in results[key])} |")
    per_group_ms = (1 / remote - 1 / ray) / vs_trl.GROUPS * 1000
    print(f"remote / ray steps/s: {remote / ray:.3f} (target >= 0.9); HTTP overhead per "
          f"group: {per_group_ms:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
