"""Helpers of the isolation tests: plugins installed as users install them, flat console text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def install_no_deps(source: Path, target: Path) -> Path:
    """``pip install --no-deps --target``: the plugin's metadata and entry point only."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(target), str(source)],
                   check=True, capture_output=True)
    return target


def flat(text: str) -> str:
    """Console output with rich's line wrapping undone."""
    return " ".join(text.split())
