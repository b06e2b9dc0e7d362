"""The offline index built by scripts/install.d/verifiers.sh serves verifiers' chat program."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from rollyard_verifiers.environment import OFFLINE_INDEX, harness_env
from rollyard_verifiers.offline_index import chat_program_requirements, normalize, write_index


def test_harness_programs_get_this_venvs_uv_python_and_index() -> None:
    assert (OFFLINE_INDEX / "index.html").is_file(), "run `make install` (scripts/install.d)"
    env = harness_env()
    first = env["PATH"].split(os.pathsep)[0]
    assert Path(first, "uv").is_file()
    assert env["UV_PYTHON"] == sys.executable
    assert env["UV_DEFAULT_INDEX"] == OFFLINE_INDEX.as_uri()


def test_rollyard_verifiers_index_names_another_index(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An isolated rollout venv has no index of its own; it is pointed at the core venv's."""
    (tmp_path / "index.html").write_text("<html></html>")
    monkeypatch.setenv("ROLLYARD_VERIFIERS_INDEX", str(tmp_path))
    assert harness_env()["UV_DEFAULT_INDEX"] == tmp_path.resolve().as_uri()
    monkeypatch.setenv("ROLLYARD_VERIFIERS_INDEX", str(tmp_path / "missing"))
    assert "UV_DEFAULT_INDEX" not in harness_env()


@pytest.mark.slow  # imports verifiers
def test_uv_resolves_the_chat_program_from_the_index_alone(tmp_path: Path) -> None:
    requirements = chat_program_requirements()
    assert "openai" in requirements
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "cache"), "UV_NO_CONFIG": "1"}
    resolved = subprocess.run(
        [str(Path(harness_env()["PATH"].split(os.pathsep)[0], "uv")), "pip", "compile", "-",
         "--offline", "--python-version", f"{sys.version_info[0]}.{sys.version_info[1]}",
         "--default-index", OFFLINE_INDEX.as_uri()],
        input="\n".join(requirements), capture_output=True, text=True, env=env, timeout=120)
    assert resolved.returncode == 0, resolved.stderr
    pinned = {normalize(line.split("==")[0]) for line in resolved.stdout.splitlines()
              if "==" in line and not line.startswith("#")}
    assert {normalize(r.split("==")[0]) for r in requirements} <= pinned


def test_index_pages_link_every_wheel_with_its_hash(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("Typing_Extensions-4.0-py3-none-any.whl", "mcp-2.0.0-py3-none-any.whl",
                 "mcp-1.0.0-py3-none-any.whl"):
        (wheels / name).write_bytes(name.encode())
    assert write_index(wheels, tmp_path / "simple") == 2
    root = (tmp_path / "simple" / "index.html").read_text()
    assert 'href="mcp/"' in root and 'href="typing-extensions/"' in root
    page = (tmp_path / "simple" / "mcp" / "index.html").read_text()
    assert page.count("<a href=") == 2 and "#sha256=" in page
