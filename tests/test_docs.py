"""Meta-tests: the documentation cannot fall behind the code (datasette style).

Every hookspec has a heading with its signature in docs/plugin-hooks.md and a test named after
it; every core option and command is in docs/cli.md; the tutorial's package works."""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from rollyard import hookspecs
from rollyard.cli import CORE_COMMANDS
from rollyard.train_options import add_core_train_options

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
HOOKS = {name: func for name, func in vars(hookspecs).items()
         if inspect.isfunction(func) and hasattr(func, "rollyard_spec")}


def signature(func) -> str:
    return f"{func.__name__}({', '.join(inspect.signature(func).parameters)})"


def test_hookspecs_are_found():
    assert {"register_rollouts", "register_transports", "register_rewards", "add_options",
            "on_run_start", "on_samples", "on_step_end", "on_run_end"} <= set(HOOKS)


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_has_a_documented_signature(name):
    headings = re.findall(r"^#{2,4} `([^`]+)`\s*$", (DOCS / "plugin-hooks.md").read_text(),
                          re.M)
    assert signature(HOOKS[name]) in headings, (
        f"docs/plugin-hooks.md needs a heading `{signature(HOOKS[name])}`")


def collected_test_names() -> set[str]:
    names = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    node.name.startswith("test_"):
                names.add(node.name)
    return names


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_is_exercised_by_a_test(name):
    assert any(name in test for test in collected_test_names()), (
        f"no test function has {name!r} in its name")


def test_every_core_train_option_is_in_the_cli_reference():
    parser = argparse.ArgumentParser()
    add_core_train_options(parser)
    text = (DOCS / "cli.md").read_text()
    flags = [f for action in parser._actions for f in action.option_strings if f != "-h"]
    missing = [f for f in flags if f"`{f}" not in text]
    assert not missing, f"docs/cli.md does not document {missing}"


def test_core_train_option_defaults_match_the_cli_reference():
    parser = argparse.ArgumentParser()
    add_core_train_options(parser)
    documented = dict(re.findall(r"^\| `(--[\w-]+)[^`]*` \| ([^|]+) \|",
                                 (DOCS / "cli.md").read_text(), re.M))
    wrong = {}
    for action in parser._actions:
        if action.default in (None, False, argparse.SUPPRESS):
            continue
        cell = documented[action.option_strings[0]].strip().strip("`")
        same = (float(cell) == action.default if isinstance(action.default, (int, float))
                else cell == action.default)
        if not same:
            wrong[action.option_strings[0]] = (cell, action.default)
    assert not wrong, f"docs/cli.md defaults (documented, actual): {wrong}"


@pytest.mark.parametrize("command", ["plugins", "train", *CORE_COMMANDS])
def test_every_core_command_is_in_the_cli_reference(command):
    assert f"## `rollyard {command}`" in (DOCS / "cli.md").read_text()


def tutorial_files() -> dict[str, str]:
    """The code blocks of docs/writing-plugins.md whose first line is ``# file: PATH``."""
    blocks = re.findall(r"^```\w*\n# file: (\S+)\n(.*?)^```", (DOCS /
                        "writing-plugins.md").read_text(), re.M | re.S)
    return dict(blocks)


def test_tutorial_package_is_complete_and_its_tests_pass(tmp_path):
    files = tutorial_files()
    assert set(files) == {"pyproject.toml", "src/rollyard_arith/plugin.py",
                          "src/rollyard_arith/env.py", "tests/test_arith.py"}
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    (tmp_path / "src/rollyard_arith/__init__.py").write_text("")
    project = tomllib.loads(files["pyproject.toml"])
    assert project["project"]["entry-points"]["rollyard"] == {"arith": "rollyard_arith.plugin"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(tmp_path / "src"), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "7 passed" in result.stdout
