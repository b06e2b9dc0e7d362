"""``rollyard new-plugin``: the template copied under a new name is a working plugin package."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import tomllib
import uuid
from pathlib import Path

import pytest
from rollyard.errors import ConfigError
from rollyard.scaffold import new_plugin, template_dir
from rollyard.testing import check_plugin


def test_template_is_found_in_the_source_tree():
    assert (template_dir() / "src" / "rollyard_myenv" / "plugin.py").is_file()


def test_copy_renames_package_entry_point_options_and_classes(tmp_path):
    target = new_plugin("word-sort", tmp_path / "pkg")
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", "src/rollyard_word_sort/__init__.py",
                     "src/rollyard_word_sort/env.py", "src/rollyard_word_sort/plugin.py",
                     "src/rollyard_word_sort/reward.py", "tests/test_plugin.py"]
    project = tomllib.loads((target / "pyproject.toml").read_text())
    assert project["project"]["name"] == "rollyard-word-sort"
    assert project["project"]["entry-points"]["rollyard"] == {
        "word-sort": "rollyard_word_sort.plugin"}
    plugin = (target / "src/rollyard_word_sort/plugin.py").read_text()
    assert "from rollyard_word_sort.env import" in plugin
    env = (target / "src/rollyard_word_sort/env.py").read_text()
    assert 'name = "word-sort"' in env and '{"word-sort-sorted": 1.0}' in env
    assert "class WordSortOptions:" in env and "Options = WordSortOptions" in env
    assert "--word-sort-num-tasks" in env
    leftovers = [p for p in target.rglob("*") if p.is_file()
                 and ("myenv" in p.read_text().lower() or "myenv" in str(p).lower())]
    assert leftovers == []
    # the README and the package metadata describe the new plugin, not the example task
    assert project["project"]["description"] == "The rollyard environment plugin word-sort"
    readme = (target / "README.md").read_text()
    assert readme.startswith("# rollyard-word-sort\n\nThe rollyard environment plugin "
                             "`word-sort`: a single-turn environment.")


def test_multi_turn_kind_is_a_step_style_environment_that_passes_the_check(
        tmp_path, monkeypatch, rollyard_tokenizer):
    target = new_plugin("hot-cold", tmp_path / "pkg", kind="multi-turn")
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert files == ["README.md", "pyproject.toml", "src/rollyard_hot_cold/__init__.py",
                     "src/rollyard_hot_cold/env.py", "src/rollyard_hot_cold/plugin.py",
                     "tests/test_plugin.py"]
    assert "(TextEnv):" in (target / "src/rollyard_hot_cold/env.py").read_text()
    assert "--kind\nmulti-turn`" in (target / "README.md").read_text()
    assert not [p for p in target.rglob("*") if p.is_file() and "myenv" in p.read_text()]
    monkeypatch.syspath_prepend(str(target / "src"))
    try:
        plugin = importlib.import_module("rollyard_hot_cold.plugin")
        report = check_plugin(plugin, name="hot-cold", tokenizer=rollyard_tokenizer)
    finally:
        for module in [m for m in sys.modules if m.startswith("rollyard_hot_cold")]:
            del sys.modules[module]
    assert report.ok, report.format()
    assert "engine calls per episode" in report.format()


def test_an_unknown_kind_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--kind 'chat': choose one of"):
        new_plugin("abc", tmp_path / "pkg", kind="chat")


def test_copied_plugin_passes_the_conformance_check(tmp_path, monkeypatch, rollyard_tokenizer):
    target = new_plugin("letter-order", tmp_path / "pkg")
    monkeypatch.syspath_prepend(str(target / "src"))
    try:
        plugin = importlib.import_module("rollyard_letter_order.plugin")
        report = check_plugin(plugin, name="letter-order", tokenizer=rollyard_tokenizer,
                              argv=["--letter-order-word-length", "3"])
    finally:
        for module in [m for m in sys.modules if m.startswith("rollyard_letter_order")]:
            del sys.modules[module]
    assert report.ok, report.format()
    assert "declares --letter-order-num-tasks, --letter-order-word-length" in report.format()
    assert "reward 'letter-order-sorted'" not in report.format()  # scored, not just built
    assert "['letter-order-sorted'] scored task" in report.format()


def test_default_folder_is_rollyard_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert new_plugin("abc") == Path("rollyard-abc")
    assert (tmp_path / "rollyard-abc" / "src" / "rollyard_abc" / "env.py").is_file()


@pytest.mark.parametrize("name", ["My-Env", "1env", "env_x", "env--x", "env-", ""])
def test_bad_names_are_refused(tmp_path, name):
    with pytest.raises(ConfigError, match=f"plugin name {name!r}: use lowercase letters"):
        new_plugin(name, tmp_path / "pkg")


def test_used_folder_and_missing_template_are_refused(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="pkg already exists and is not empty"):
        new_plugin("abc", tmp_path / "pkg")
    with pytest.raises(ConfigError, match=r"plugin template not found at .*nowhere"):
        new_plugin("abc", tmp_path / "other", template=tmp_path / "nowhere")


def test_command_reports_errors_with_exit_status_1(tmp_path, capsys):
    from rollyard.cli import main

    assert main(["new-plugin", "Bad", str(tmp_path / "x")]) == 1
    assert "plugin name 'Bad'" in capsys.readouterr().err
    assert main(["new-plugin", "good", str(tmp_path / "x")]) == 0
    assert "pip install -e" in capsys.readouterr().out


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_multi_turn_plugin_passes_its_own_tests(tmp_path, rollyard_cli):
    made = rollyard_cli("new-plugin", "hot-cold", str(tmp_path / "pkg"), "--kind", "multi-turn")
    assert made.returncode == 0, made.stderr
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=tmp_path / "pkg", capture_output=True, text=True, timeout=300)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "5 passed" in tests.stdout


@pytest.mark.slow
def test_new_plugin_installs_passes_its_tests_and_is_listed(tmp_path, rollyard_cli):
    name = f"probe-{uuid.uuid4().hex[:8]}"
    made = rollyard_cli("new-plugin", name, str(tmp_path / "pkg"))
    assert made.returncode == 0, made.stderr
    installed = pip("install", "--no-deps", "--no-build-isolation", "-q", "-e",
                    str(tmp_path / "pkg"))
    try:
        assert installed.returncode == 0, installed.stderr
        tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                               cwd=tmp_path / "pkg", capture_output=True, text=True,
                               timeout=300)
        assert tests.returncode == 0, tests.stdout + tests.stderr
        assert "6 passed" in tests.stdout
        listing = rollyard_cli("plugins", "--json")
        records = {r["name"]: r for r in json.loads(listing.stdout)}
        assert records[name]["distribution"] == f"rollyard-{name}"
        assert records[name]["registers"] == {"rollout": [name], "reward": [f"{name}-sorted"]}
        assert records[name]["errors"] == []
        checked = rollyard_cli("check-plugin", name)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "0 failed, 0 skipped" in checked.stdout
    finally:
        removed = pip("uninstall", "-y", "-q", f"rollyard-{name}")
        assert removed.returncode == 0, removed.stderr
