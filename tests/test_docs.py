"""Meta-tests: the documentation cannot fall behind the code (datasette style).

Every hookspec has a heading with its signature in docs/plugin-hooks.md and a test named after
it that makes rollyard call it; the generated regions of the docs (field tables of the public
types, the core options, every plugin's options) match the code; every core command is in
docs/cli.md; the tutorial's package works."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from rollyard import hookspecs
from rollyard.cli import CORE_COMMANDS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
GEN_DOCS = ROOT / "scripts" / "gen_docs.py"
HOOKS = {name: func for name, func in vars(hookspecs).items()
         if inspect.isfunction(func) and hasattr(func, "rollyard_spec")}


def signature(func) -> str:
    return f"{func.__name__}({', '.join(inspect.signature(func).parameters)})"


def test_hookspecs_are_found():
    assert {"register_rollouts", "register_transports", "register_rewards", "register_engines",
            "register_commands", "add_options", "on_run_start", "on_samples", "on_step_end",
            "on_run_end"} <= set(HOOKS)


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_has_a_documented_signature(name):
    headings = re.findall(r"^#{2,4} `([^`]+)`\s*$", (DOCS / "plugin-hooks.md").read_text(),
                          re.M)
    assert signature(HOOKS[name]) in headings, (
        f"docs/plugin-hooks.md needs a heading `{signature(HOOKS[name])}`")


# --------------------------------------------------------------------------- hooks are called


def is_slow(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(re.search(r"\bmark\.(slow|sglang)\b", ast.unparse(d))
               for d in node.decorator_list)


def named_after_hooks() -> dict[str, list[str]]:
    """``{hook: node ids}`` of the test functions (not marked slow) whose name contains it."""
    named: dict[str, list[str]] = {name: [] for name in HOOKS}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path == Path(__file__).resolve():
            continue
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or \
                    not node.name.startswith("test_") or is_slow(node):
                continue
            for hook in HOOKS:
                if hook in node.name:
                    named[hook].append(f"{path.relative_to(ROOT)}::{node.name}")
    return named


@pytest.fixture(scope="module")
def hook_calls(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], str]:
    """Run the tests named after hooks in a fresh pytest that records, per test, each hook
    call rollyard's own code made with at least one implementation (tests/conftest.py's
    ``--record-hook-calls``). Returns the records and the end of that run's output."""
    node_ids = sorted({i for ids in named_after_hooks().values() for i in ids})
    out = tmp_path_factory.mktemp("hook-calls") / "calls.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLYARD_")}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         f"--record-hook-calls={out}", *node_ids],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    records = ([json.loads(line) for line in out.read_text().splitlines()]
               if out.exists() else [])
    return records, (result.stdout + result.stderr)[-4000:]


@pytest.mark.parametrize("name", sorted(HOOKS))
def test_every_hook_is_called_by_a_test_named_after_it(name, hook_calls):
    named = named_after_hooks()[name]
    assert named, f"no test function (not marked slow) has {name!r} in its name"
    records, output = hook_calls
    calling = {r["test"].split("[")[0] for r in records if r["hook"] == name}
    assert calling & set(named), (
        f"none of the tests named after {name!r} made rollyard call it (with a plugin "
        f"implementing it): {named}\n--- their run:\n{output}")


# --------------------------------------------------------------------------- generated docs


def gen_docs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GEN_DOCS), *args], capture_output=True,
                          text=True, timeout=120)


def test_generated_docs_match_the_code():
    """Field tables, core options and plugin options in docs/ are what the code declares."""
    result = gen_docs("--check")
    assert result.returncode == 0, (
        f"docs/ are stale: run `make docs` and commit the result\n{result.stdout}"
        f"{result.stderr}")


def test_docs_check_shows_the_drift_and_make_docs_repairs_it(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    cli = docs / "cli.md"
    text = cli.read_text()
    assert "| `--steps` | `150` |" in text
    cli.write_text(text.replace("| `--steps` | `150` |", "| `--steps` | `100` |"))
    stale = gen_docs("--check", "--docs", str(docs))
    assert stale.returncode == 1
    assert "-| `--steps` | `100` |" in stale.stdout
    assert "+| `--steps` | `150` |" in stale.stdout
    assert "run `make docs`" in stale.stderr
    assert gen_docs("--docs", str(docs)).returncode == 0
    assert cli.read_text() == text


def test_a_region_nothing_produces_is_an_error(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    extra = docs / "extra.md"
    extra.write_text("<!-- generated: options:nosuch -->\n<!-- end generated: options:nosuch -->\n")
    result = gen_docs("--check", "--docs", str(docs))
    assert result.returncode == 1
    assert "docs/extra.md: nothing produces region 'options:nosuch'" in result.stderr


@pytest.mark.parametrize("command", ["plugins", "train", "eval", "report", *CORE_COMMANDS])
def test_every_core_command_is_in_the_cli_reference(command):
    assert f"## `rollyard {command}`" in (DOCS / "cli.md").read_text()


# --------------------------------------------------------------------------- the tutorial


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
    assert "8 passed" in result.stdout


def multi_turn_examples() -> dict[str, str]:
    """The code blocks of docs/writing-plugins.md whose first line is ``# example: FILE``."""
    return dict(re.findall(r"^```python\n# example: (\S+)\n(.*?)^```",
                           (DOCS / "writing-plugins.md").read_text(), re.M | re.S))


def test_multi_turn_chapter_examples_run(tmp_path):
    """The step-style game and the tool-using Conversation of the chapter, with their tests
    (scripted episodes and the conformance check)."""
    files = multi_turn_examples()
    assert set(files) == {"guessing.py", "lookup.py", "test_examples.py"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_examples.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout
