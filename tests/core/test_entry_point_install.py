"""A third-party plugin installed with ``pip install -e`` is discovered by its entry point."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

PYPROJECT = """
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.3.1"
dependencies = []

[project.entry-points.rollyard]
{entry_point} = "{module}.plugin"

[tool.setuptools]
packages = ["{module}"]
"""

PLUGIN = """
from rollyard import Reward, hookimpl


class Parity(Reward):
    name = "{reward}"

    async def score(self, sample, task):
        return float(len(sample.response_ids) % 2 == 0)


@hookimpl
def register_rewards(register):
    register(Parity)


@hookimpl
def add_options(group):
    group.add_argument("--{entry_point}-modulus", type=int, default=2, help="divide by this")
"""


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_pip_installed_plugin_is_discovered_by_entry_point(tmp_path: Path, rollyard_cli):
    tag = uuid.uuid4().hex[:8]
    dist, module, entry_point, reward = (f"rollyard-throwaway-{tag}", f"rollyard_throwaway_{tag}",
                                         f"throwaway{tag}", f"parity-{tag}")
    project = tmp_path / dist
    (project / module).mkdir(parents=True)
    (project / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT).format(
        dist=dist, entry_point=entry_point, module=module))
    (project / module / "__init__.py").write_text("")
    (project / module / "plugin.py").write_text(textwrap.dedent(PLUGIN).format(
        reward=reward, entry_point=entry_point))
    installed = pip("install", "--no-deps", "--no-build-isolation", "-q", "-e", str(project))
    try:
        assert installed.returncode == 0, installed.stderr
        listing = rollyard_cli("plugins", "--json", cwd=tmp_path)
        assert listing.returncode == 0, listing.stderr
        records = {r["name"]: r for r in json.loads(listing.stdout)}
        assert records[entry_point] == {
            "name": entry_point, "distribution": dist, "version": "0.3.1",
            "entry_point": f"{module}.plugin", "hooks": ["add_options", "register_rewards"],
            "registers": {"reward": [reward]}, "errors": []}
        assert records["toy"]["errors"] == []
        help_text = rollyard_cli("train", "--help", cwd=tmp_path).stdout
        assert f"{entry_point} (plugin options)" in help_text
        assert f"--{entry_point}-modulus MODULUS" in help_text
    finally:
        removed = pip("uninstall", "-y", "-q", dist)
    assert removed.returncode == 0, removed.stderr
    after = rollyard_cli("plugins", "--json", cwd=tmp_path)
    assert entry_point not in {r["name"] for r in json.loads(after.stdout)}


#: A rollout plugin exactly as docs/writing-plugins.md taught it before typed options: options
#: through the ``add_options`` hook (a dict in ``context.options``), the config read as a dict.
OLD_STYLE_PLUGIN = """
import random

from rollyard import Rollout, Task, hookimpl
from rollyard.episodes import sample_single_turn


class Echo(Rollout):
    name = "{entry_point}"
    default_rewards = {{"exact-match": 1.0}}

    def __init__(self, context):
        super().__init__(context)
        count = int(context.options.get("count") or 4)
        rng = random.Random(context.config.get("seed", 0))
        words = ["".join(rng.choice("ab") for _ in range(3)) for _ in range(count)]
        self._tasks = [Task(id=f"echo-{{i}}", prompt=f"say {{w}}", data={{"answer": w}})
                       for i, w in enumerate(words)]

    def tasks(self, split):
        return self._tasks[:-1] if split == "train" else self._tasks[-1:]

    async def run_group(self, task, n):
        return await sample_single_turn(self.context, task, n)


@hookimpl
def register_rollouts(register):
    register(Echo)


@hookimpl
def add_options(group):
    group.add_argument("--{entry_point}-count", type=int, default=4, help="tasks")
"""


@pytest.mark.slow
def test_a_plugin_in_the_add_options_style_still_checks_and_trains(tmp_path: Path,
                                                                   rollyard_cli):
    tag = uuid.uuid4().hex[:8]
    dist, module, entry_point = (f"rollyard-oldstyle-{tag}", f"rollyard_oldstyle_{tag}",
                                 f"oldstyle{tag}")
    project = tmp_path / dist
    (project / module).mkdir(parents=True)
    (project / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT).format(
        dist=dist, entry_point=entry_point, module=module))
    (project / module / "__init__.py").write_text("")
    (project / module / "plugin.py").write_text(textwrap.dedent(OLD_STYLE_PLUGIN).format(
        entry_point=entry_point))
    installed = pip("install", "--no-deps", "--no-build-isolation", "-q", "-e", str(project))
    try:
        assert installed.returncode == 0, installed.stderr
        checked = rollyard_cli("check-plugin", entry_point, f"--{entry_point}-count", "5",
                               cwd=tmp_path)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"--{entry_point}-count" in checked.stdout
        trained = rollyard_cli(
            "train", "--rollout-plugin", entry_point, f"--{entry_point}-count", "6",
            "--steps", "1", "--groups-per-step", "2", "--group-size", "4",
            "--max-new-tokens", "4", "--keep-zero-variance-groups", "--no-progress",
            "--num-cpus", "2", "--runs-dir", str(tmp_path / "runs"), "--name", "old",
            cwd=tmp_path, timeout=600)
        assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-2000:]
        config = json.loads((tmp_path / "runs" / "old" / "config.json").read_text())
        assert config[entry_point] == {"count": 6}
        rows = (tmp_path / "runs" / "old" / "metrics.jsonl").read_text().splitlines()
        assert json.loads(rows[0])["samples/count"] == 8
    finally:
        removed = pip("uninstall", "-y", "-q", dist)
    assert removed.returncode == 0, removed.stderr
