"""Build the PEP 503 index that lets verifiers' harness programs install without a network.

verifiers' ``null`` harness runs a PEP 723 chat program with ``uv sync --script``, which
resolves the program's dependencies from a package index every time a process starts. At
install time (``scripts/install.d/verifiers.sh``) this module downloads those wheels once into
``<venv>/share/rollyard-verifiers/wheels`` and writes a simple index beside them;
:func:`rollyard_verifiers.environment.harness_env` points ``uv`` at it. Re-running is a no-op
while verifiers' version and this Python stay the same.

Usage: ``python -m rollyard_verifiers.offline_index [--force]``.
"""

from __future__ import annotations

import hashlib
import html
import importlib.metadata as md
import re
import shutil
import subprocess
import sys
from pathlib import Path

from rollyard_verifiers.environment import OFFLINE_INDEX

WHEELS = OFFLINE_INDEX.parent / "wheels"
STAMP = OFFLINE_INDEX.parent / "stamp"
SCRIPT_DEPENDENCIES = re.compile(r"^# dependencies = (\[.*\])$", re.MULTILINE)


def stamp() -> str:
    """What the index depends on: verifiers' version and this interpreter."""
    return f"verifiers=={md.version('verifiers')} python={sys.version_info[:3]}\n"


def chat_program_requirements() -> list[str]:
    """The dependencies declared by verifiers' bundled chat program (its PEP 723 header)."""
    import ast

    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM

    match = SCRIPT_DEPENDENCIES.search(CHAT_PROGRAM)
    if match is None:
        raise RuntimeError("verifiers' chat program declares no '# dependencies = [...]' line; "
                           "rollyard-verifiers does not know this verifiers version")
    return list(ast.literal_eval(match.group(1)))


def normalize(name: str) -> str:
    """PEP 503 project name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


def write_index(wheels: Path, index: Path) -> int:
    """Write ``index`` (root page plus one page per project) linking every wheel in
    ``wheels`` with its sha256; return the number of projects."""
    projects: dict[str, list[Path]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        projects.setdefault(normalize(wheel.name.split("-")[0]), []).append(wheel)
    if index.exists():
        shutil.rmtree(index)
    index.mkdir(parents=True)
    for project, files in projects.items():
        links = "".join(
            f'<a href="{html.escape(f.resolve().as_uri())}#sha256='
            f'{hashlib.sha256(f.read_bytes()).hexdigest()}">{html.escape(f.name)}</a><br>\n'
            for f in files)
        (index / project).mkdir()
        (index / project / "index.html").write_text(
            f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    root = "".join(f'<a href="{p}/">{p}</a><br>\n' for p in sorted(projects))
    (index / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{root}</body></html>\n")
    return len(projects)


def build(force: bool = False) -> str:
    """Download the chat program's wheels and write the index, unless already current."""
    if not force and STAMP.is_file() and STAMP.read_text() == stamp() and \
            (OFFLINE_INDEX / "index.html").is_file():
        return f"offline index up to date: {OFFLINE_INDEX}"
    requirements = chat_program_requirements()
    if WHEELS.exists():
        shutil.rmtree(WHEELS)
    WHEELS.mkdir(parents=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:",
                        "--dest", str(WHEELS), *requirements], check=True)
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"rollyard-verifiers: downloading {requirements} for the offline "
                         f"index failed (pip exit {exc.returncode}); verifiers' harness "
                         "programs need them. Rerun with access to a package index.") from exc
    count = write_index(WHEELS, OFFLINE_INDEX)
    STAMP.write_text(stamp())
    return f"offline index of {count} projects for {requirements}: {OFFLINE_INDEX}"


if __name__ == "__main__":
    print(build(force="--force" in sys.argv[1:]))
