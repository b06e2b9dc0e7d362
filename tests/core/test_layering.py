"""The trainer library stays below the orchestrator: no module of ``rollyard.training`` imports
``rollyard.run``, counting every import in its source (lazy ones inside functions, those under
``if TYPE_CHECKING:``, relative ones and ``importlib.import_module("...")`` with a literal);
and no import cycle runs through the trainer library or the code-golf plugin, counted the same
way."""

from __future__ import annotations

import ast
from pathlib import Path

import rollyard
import rollyard_codegolf

CORE = Path(rollyard.__file__).resolve().parent
CODEGOLF = Path(rollyard_codegolf.__file__).resolve().parent


def module_name(path: Path, root: Path) -> str:
    """``rollyard.training.group`` for ``<root>/rollyard/training/group.py``."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``path``, wherever it sits, relative imports
    resolved against the module's package; ``from a import b`` counts as ``a`` and ``a.b``."""
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ast.unparse(node.func) in ("import_module", "importlib.import_module",
                                             "__import__")):
            found.append((node.lineno, node.args[0].value))
    return sorted(found)


def imports_of(package: Path, forbidden: str) -> list[str]:
    """``file:line module`` for every import of ``forbidden`` (or a submodule) under
    ``package``."""
    root = package.parent
    while (root / "__init__.py").exists():
        root = root.parent
    return [f"{path.relative_to(root)}:{line} {module}"
            for path in sorted(package.rglob("*.py"))
            for line, module in imported_modules(path, root)
            if module == forbidden or module.startswith(forbidden + ".")]


def test_rollyard_training_imports_nothing_from_rollyard_run() -> None:
    assert imports_of(CORE / "training", "rollyard.run") == []


def test_the_check_finds_lazy_type_checking_relative_and_dynamic_imports(tmp_path) -> None:
    training = tmp_path / "rollyard" / "training"
    training.mkdir(parents=True)
    (tmp_path / "rollyard" / "__init__.py").write_text("")
    (training / "__init__.py").write_text("from ..run import collect\n")
    (training / "lazy.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from rollyard.run.driver import Driver\n"
        "def f():\n"
        "    import rollyard.run.collect\n"
        "    import importlib\n"
        "    return importlib.import_module('rollyard.run.metrics')\n"
        "from rollyard import run\n"
        "from rollyard.runner import x\n")
    assert imports_of(training, "rollyard.run") == [
        "rollyard/training/__init__.py:1 rollyard.run",
        "rollyard/training/__init__.py:1 rollyard.run.collect",
        "rollyard/training/lazy.py:3 rollyard.run.driver",
        "rollyard/training/lazy.py:3 rollyard.run.driver.Driver",
        "rollyard/training/lazy.py:5 rollyard.run.collect",
        "rollyard/training/lazy.py:7 rollyard.run.metrics",
        "rollyard/training/lazy.py:8 rollyard.run",
    ]


def import_cycles(*packages: Path) -> list[list[str]]:
    """The import cycles among the modules of ``packages``: each strongly connected component
    of more than one module of the graph "module -> a module it imports", sorted."""
    graph: dict[str, set[str]] = {}
    paths = {}
    for package in packages:
        for path in package.rglob("*.py"):
            if "templates" not in path.parts:
                paths[module_name(path, package.parent)] = (path, package.parent)
    for name, (path, root) in paths.items():
        graph[name] = {m for _, m in imported_modules(path, root) if m in paths and m != name}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while not component or component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def test_no_import_cycle_runs_through_the_trainer_library_or_codegolf() -> None:
    cycles = import_cycles(CORE, CODEGOLF)
    assert [c for c in cycles
            if any(m.startswith(("rollyard.training", "rollyard_codegolf")) for m in c)] == []


def test_the_cycle_check_finds_cycles_closed_lazily_or_for_type_checking(tmp_path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.group import Group\n")
    (package / "group.py").write_text("def make():\n    from pkg.worker import Worker\n")
    (package / "worker.py").write_text("from pkg import helpers\n")
    (package / "helpers.py").write_text("from typing import TYPE_CHECKING\n"
                                        "if TYPE_CHECKING:\n    from pkg.tasks import Task\n")
    (package / "tasks.py").write_text("from pkg.helpers import x\n")
    assert import_cycles(package) == [["pkg", "pkg.group", "pkg.worker"],
                                      ["pkg.helpers", "pkg.tasks"]]
