"""The light core: ``pip install rollyard`` without the training stack, in a venv of its own.

The venv is built once per session with uv (the core from this checkout, its light
dependencies only, plus pytest to run a generated plugin's tests), so it checks what the
package declares, not what the project's own venv happens to hold.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = Path(sys.executable).with_name("uv")
HEAVY = ("torch", "ray", "megatron", "transformers", "tokenizers", "numpy")

pytestmark = pytest.mark.slow  # a venv built with uv (about 10 s), then fresh processes


def _env() -> dict[str, str]:
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")
    return {k: v for k, v in os.environ.items()
            if k not in drop and not k.startswith("ROLLYARD_")} | {"COLUMNS": "200"}


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=_env(),
                          cwd=cwd, timeout=300)


def core_source(dest: Path) -> Path:
    """A copy of the core's package sources (building in the checkout would leave a stale
    ``rollyard.egg-info`` beside it, seen by every ``python -m`` run from the root)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    for name in ("core", "plugins"):
        shutil.copytree(ROOT / name, dest / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return dest


@pytest.fixture(scope="session")
def light_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("light-core")
    venv = root / "venv"
    built = _run(UV, "venv", "-q", "--python", sys.executable, venv)
    assert built.returncode == 0, built.stderr
    installed = _run(UV, "pip", "install", "-q", "--python", venv / "bin" / "python",
                     core_source(root / "source"), "pytest")
    assert installed.returncode == 0, installed.stderr
    return venv


def test_the_light_core_installs_without_the_training_stack(light_venv: Path) -> None:
    python = light_venv / "bin" / "python"
    probe = ("import importlib.util, json, sys; import rollyard, rollyard.cli, rollyard.testing;"
             f"print(json.dumps({{'imported': [m for m in {HEAVY!r} if m in sys.modules],"
             f"'installed': [m for m in {HEAVY!r} if importlib.util.find_spec(m)]}}))")
    got = _run(python, "-c", probe)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == {"imported": [], "installed": []}

    listed = _run(light_venv / "bin" / "rollyard", "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    records = {r["name"]: r for r in json.loads(listed.stdout)}
    assert records["toy"]["registers"] == {"rollout": ["toy"]}
    assert all(not r["errors"] for r in records.values()), records


def test_a_plugin_is_written_tested_and_checked_with_the_light_core(
        light_venv: Path, tmp_path: Path) -> None:
    rollyard = light_venv / "bin" / "rollyard"
    created = _run(rollyard, "new-plugin", "lightenv", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    plugin_dir = tmp_path / "rollyard-lightenv"
    installed = _run(UV, "pip", "install", "-q", "--python", light_venv / "bin" / "python",
                     "-e", plugin_dir)
    assert installed.returncode == 0, installed.stderr

    tests = _run(light_venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 cwd=plugin_dir)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " passed" in tests.stdout and "skipped" not in tests.stdout

    checked = _run(rollyard, "check-plugin", "lightenv")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "0 failed" in checked.stdout


@pytest.mark.parametrize("argv", [["train", "--steps", "2"], ["init-model", "model"]])
def test_a_command_needing_the_training_stack_says_so_in_one_line(
        light_venv: Path, tmp_path: Path, argv: list[str]) -> None:
    got = _run(light_venv / "bin" / "rollyard", *argv, cwd=tmp_path)
    assert got.returncode == 1
    assert got.stderr == (f"rollyard {argv[0]} needs rollyard[train]: "
                          "pip install 'rollyard[train]'\n")
    assert not (tmp_path / "model").exists() and not (tmp_path / "runs").exists()
