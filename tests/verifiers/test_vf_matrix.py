"""The verifiers matrix: each pre-0.4 test environment (tests/verifiers/envs/*/pyproject.toml,
installed ``--no-deps`` as users install published ones) gets its venv through
``rollyard verifiers install`` (the plugin's ``isolated_environment``), built from the package
index and cached in the ``isolated_envs_dir`` folder, and is checked there: it holds the
verifiers selected and the environment.

``make test`` runs the short list: every environment with the verifiers its own requirement
selects, checking the venv's metadata (the 2-step training
tests then run in these venvs). ``make test-verifiers-matrix`` (``ROLLYARD_VF_MATRIX=long``)
runs the single-turn one on 0.1.x and every release of each supported minor instead, each
building the environment with ``load_environment()``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

ENVS = Path(__file__).parent / "envs"
SOURCES = {path.parent.name: path.parent for path in sorted(ENVS.glob("*/pyproject.toml"))}
#: the verifiers release each test environment's own requirement selects (newest of its API)
EXPECTED = {"legacy-arith": "0.3.1", "legacy-tools": "0.3.1", "v020-arith": "0.2.0"}
SINGLE_TURN = "legacy-arith"
LONG = ["0.1.9", "0.1.10", "0.1.11", "0.1.12", "0.1.14", "0.2.0", "0.2.1", "0.3.0", "0.3.1"]
LONG_MATRIX = os.environ.get("ROLLYARD_VF_MATRIX") == "long"
CASES = ([(SINGLE_TURN, v) for v in LONG] if LONG_MATRIX
         else [(name, None) for name in SOURCES])
#: the short list reads the venv's metadata (the training tests then run these venvs); the long
#: one builds the environment with load_environment() on each release
CHECK = """\
import importlib.metadata as md, importlib.util, json, sys
report = {"verifiers": md.version("verifiers"),
          "module": importlib.util.find_spec(sys.argv[1]) is not None}
if sys.argv[2] == "load":
    env = __import__(sys.argv[1]).load_environment()
    data = env.dataset if env.dataset is not None else env.eval_dataset
    report.update({"class": type(env).__name__, "tasks": len(data)})
print(json.dumps(report))
"""


def distribution_name(source: Path) -> str:
    return tomllib.loads((source / "pyproject.toml").read_text())["project"]["name"]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "version"), CASES,
                         ids=[f"{n}-{v or 'selected'}" for n, v in CASES])
def test_the_environment_builds_in_the_venv_selected_for_it(
        rollyard_cli, legacy_env_site: Path, isolated_envs_dir: Path, tmp_path: Path, name: str,
        version: str | None) -> None:
    assert name in EXPECTED, f"add the verifiers {name} selects to EXPECTED"
    env_id = distribution_name(SOURCES[name])
    wanted = version or EXPECTED[name]
    args = ["verifiers", "install", env_id] + (["--verifiers-version", version] if version else [])
    built = rollyard_cli(*args, paths=[legacy_env_site], timeout=900,
                         env={"ROLLYARD_ENVS_DIR": str(isolated_envs_dir)})
    assert built.returncode == 0, built.stderr[-3000:]
    venv = Path(built.stdout.splitlines()[-1])
    module = env_id.replace("-", "_")
    assert venv.parent == isolated_envs_dir
    assert venv.name.startswith(f"verifiers-{wanted}-{module}-")

    check = subprocess.run([str(venv / "bin" / "python"), "-c", CHECK, module,
                            "load" if LONG_MATRIX else "metadata"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=300,
                           env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert check.returncode == 0, check.stderr[-3000:]
    report = json.loads(check.stdout.splitlines()[-1])
    assert report["verifiers"] == wanted and report["module"]
    if LONG_MATRIX:
        assert report["class"].endswith("Env") and report["tasks"] > 0


@pytest.mark.slow
def test_a_second_install_is_a_cache_hit(rollyard_cli, legacy_env_site: Path,
                                         isolated_envs_dir: Path) -> None:
    """After the matrix (or on its own: the first call builds)."""
    env_id = distribution_name(SOURCES[SINGLE_TURN])
    env = {"ROLLYARD_ENVS_DIR": str(isolated_envs_dir)}
    first = rollyard_cli("verifiers", "install", env_id, paths=[legacy_env_site], env=env,
                         timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    again = rollyard_cli("verifiers", "install", env_id, paths=[legacy_env_site], env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    path = again.stdout.splitlines()[-1]
    assert path == first.stdout.splitlines()[-1]
    assert f"using the cached isolated environment {path}" in " ".join(again.stderr.split())
    listed = rollyard_cli("env", "list", "--json", env=env)
    [entry] = [e for e in json.loads(listed.stdout) if e["path"] == path]
    assert entry["label"] == f"verifiers-{EXPECTED[SINGLE_TURN]}-{env_id.replace('-', '_')}"
