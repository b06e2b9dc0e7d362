"""The light core (``pip install rollyard``, no training stack): installed size and import time.

Builds a fresh venv with uv (the core from this checkout, its declared light dependencies),
then reports the venv's size on disk, the median time of ``python -c "import rollyard"`` beside
``python -c pass`` in fresh processes (taking turns, so both see the same load), and which
heavy modules the import pulls in.

Target: under 50 MB installed, none of torch, ray, megatron, transformers, numpy imported.
Exit status 1 when missed.

    .venv/bin/python benchmarks/light_core.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV = str(Path(sys.executable).with_name("uv"))
HEAVY = ("torch", "ray", "megatron", "transformers", "tokenizers", "numpy")
TARGET_MB = 50.0


def size_mb(folder: Path) -> float:
    """Bytes of the regular files under ``folder`` (hard links counted once), in MB."""
    seen, total = set(), 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            stat = path.stat()
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_size
    return total / 1e6


def wall(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed imports")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    with tempfile.TemporaryDirectory(prefix="rollyard-light-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([UV, "venv", "-q", "--python", sys.executable, str(venv)], check=True,
                       env=env)
        # from a copy: a build in the checkout leaves a stale rollyard.egg-info there
        source = shutil.copytree(ROOT, Path(tmp) / "source", ignore=shutil.ignore_patterns(
            ".*", "runs", "tests", "benchmarks", "build", "*.egg-info", "__pycache__"))
        subprocess.run([UV, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                        str(source)], check=True, env=env)
        python = str(venv / "bin" / "python")
        megabytes = size_mb(venv)
        for argv in ([python, "-c", "import rollyard"], [python, "-c", "pass"]):
            wall(argv)  # compile and cache
        times: dict[str, list[float]] = {"import rollyard": [], "pass": []}
        for _ in range(args.runs):
            for label in times:
                times[label].append(wall([python, "-c", label]))
        probe = subprocess.run(
            [python, "-c", f"import sys, rollyard, rollyard.cli, rollyard.testing; "
                           f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"],
            check=True, capture_output=True, text=True)
    heavy = probe.stdout.split()
    imported, baseline = (statistics.median(times[k]) for k in ("import rollyard", "pass"))
    ok = megabytes < TARGET_MB and not heavy
    print(f"light core venv: {megabytes:.1f} MB installed (target < {TARGET_MB:.0f} MB)")
    print(f"python -c 'import rollyard': {imported:.3f} s median, python -c pass: "
          f"{baseline:.3f} s; the import itself {imported - baseline:.3f} s")
    print(f"heavy modules imported by rollyard, rollyard.cli, rollyard.testing: "
          f"{', '.join(heavy) or 'none'}  {'ok' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
