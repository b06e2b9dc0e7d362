"""Throughput of the code-golf sandbox beside a bare ``subprocess.run`` of the same interpreter.

Two programs: a trivial one (``print(input())``) and a typical one (the reference solution of
``nth-prime`` on a hidden case). Each is executed by ``--workers`` threads for ``--seconds``
in rounds that alternate sandboxed and bare runs, so both see the same machine load. The
bare run is the same interpreter with the same flags (``-I -S``) and stdin, with no
bubblewrap, rlimits, namespaces or output capping.

Targets: sandbox/bare >= 0.5 and >= 20 sandboxed executions per second with 2 workers.
Exit status 1 when either is missed.

    .venv/bin/python benchmarks/sandbox.py [--workers 2] [--seconds 1] [--rounds 10]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from rollyard_codegolf.sandbox import Sandbox
from rollyard_codegolf.tasks import load_tasks

RATIO_TARGET = 0.5
RATE_TARGET = 20.0


def programs() -> dict[str, tuple[str, str, str]]:
    """label -> (code, stdin, expected stdout)."""
    nth_prime = next(t for t in load_tasks() if t.id == "nth-prime")
    stdin, expected = nth_prime.hidden[0]
    return {"trivial": ("print(input())", "hello\n", "hello\n"),
            "typical": (nth_prime.reference, stdin, expected)}


def throughput(run_one: Callable[[], str], expected: str, workers: int,
               seconds: float) -> float:
    """Executions per second of ``run_one`` by ``workers`` threads for about ``seconds``."""
    deadline = time.perf_counter() + seconds

    def worker() -> int:
        done = 0
        while time.perf_counter() < deadline:
            output = run_one()
            if output.strip() != expected.strip():
                raise RuntimeError(f"a benchmark run printed {output[-300:]!r}, expected "
                                   f"{expected!r}")
            done += 1
        return done

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        total = sum(pool.map(lambda _: worker(), range(workers)))
    return total / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=1.0, help="per measurement")
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds")
    args = parser.parse_args()
    sandbox = Sandbox()
    bare_argv = [sandbox.python, "-I", "-S", "-c"]
    ok = True
    print(f"sandbox throughput, {args.workers} workers, {args.rounds} x {args.seconds}s "
          "alternating rounds (executions/s)")
    print(f"{'program':<10}{'sandbox':>10}{'bare':>10}{'ratio':>8}")
    for label, (code, stdin, expected) in programs().items():
        def sandboxed(code: str = code, stdin: str = stdin) -> str:
            result = sandbox.run(code, stdin)
            return result.stdout if result.ok else repr(result)

        def bare(code: str = code, stdin: str = stdin) -> str:
            return subprocess.run([*bare_argv, code], input=stdin, capture_output=True,
                                  text=True, env={}, check=False).stdout

        sandboxed(), bare()  # warm the file cache
        rates: dict[str, list[float]] = {"sandbox": [], "bare": []}
        for _ in range(args.rounds):
            rates["sandbox"].append(throughput(sandboxed, expected, args.workers, args.seconds))
            rates["bare"].append(throughput(bare, expected, args.workers, args.seconds))
        box, plain = (sum(v) / len(v) for v in (rates["sandbox"], rates["bare"]))
        ratio = box / plain
        ok &= ratio >= RATIO_TARGET and box >= RATE_TARGET
        print(f"{label:<10}{box:>10.1f}{plain:>10.1f}{ratio:>8.2f}")
    print(f"targets: ratio >= {RATIO_TARGET}, sandbox >= {RATE_TARGET}/s -> "
          f"{'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
