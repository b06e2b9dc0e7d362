"""What the run's own-session Ray cluster costs at start-up and shutdown.

A run starts its local cluster as ``ray start --head --block`` in a session of its own and joins
it (:mod:`rollyard.run.ray_cluster`), so that a signal to the run's process group does not kill
Ray. The plain way, ``ray.init(num_cpus=N)``, starts the same processes as the driver's
children. This script times both in fresh processes — start, one task, stop — alternating
``--pairs`` times so that load from other processes hits both alike, and prints the medians
side by side with their ratio.

Target: the own-session start within 1.5x of ``ray.init()``'s.

    .venv/bin/python benchmarks/ray_start.py [--pairs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

TARGET_RATIO = 1.5
#: Each variant: a script that starts Ray, runs one task and stops, printing its seconds.
VARIANTS = {
    "ray.init() (driver's children)": """
import time; t = time.perf_counter()
import ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
ray.get(ray.remote(lambda: 1).remote()); up = time.perf_counter() - t
ray.shutdown(); print(up, time.perf_counter() - t)
""",
    "own session (rollyard)": """
import time; t = time.perf_counter()
from rollyard.run.ray_cluster import start_ray, stop_ray
import ray
start_ray(None, 2)
ray.get(ray.remote(lambda: 1).remote()); up = time.perf_counter() - t
stop_ray(); print(up, time.perf_counter() - t)
""",
}


def timed(script: str, env: dict[str, str]) -> tuple[float, float]:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=600, check=True)
    up, total = done.stdout.split()[-2:]
    return float(up), float(total)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    ray_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # plain ray.init's files: not /tmp/ray
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_TMPDIR": ray_dir}
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    try:
        for _ in range(args.pairs):
            for name, script in VARIANTS.items():
                times[name].append(timed(script, env))
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    print(f"{'':34} {'up (median s)':>14} {'up+stop':>10}")
    medians = {}
    for name, pairs in times.items():
        up = statistics.median(p[0] for p in pairs)
        total = statistics.median(p[1] for p in pairs)
        medians[name] = up
        print(f"{name:34} {up:14.2f} {total:10.2f}")
    plain, own = medians.values()
    ratio = own / plain
    print(f"own session / ray.init(): {ratio:.2f} (target < {TARGET_RATIO}); "
          f"{args.pairs} pairs, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    return 0 if ratio < TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
