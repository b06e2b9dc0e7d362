"""The layering of the packages, counting every import in their source (lazy ones inside
functions, those under ``if TYPE_CHECKING:``, relative ones and ``importlib.import_module("...")``
with a literal): the trainer library stays below the orchestrator (no module of
``rollyard.training`` imports ``rollyard.run``), and no module imports itself through others."""

from __future__ import annotations

import ast
from pathlib import Path

import rollyard

CORE = Path(rollyard.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[2]
#: The import roots of the packages this repository ships (the templates are copied, not run).
PACKAGE_ROOTS = [REPO / "core", REPO / "plugins", REPO / "plugins-codegolf",
                 REPO / "plugins-verifiers"]


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


def import_graph(roots: list[Path]) -> dict[str, set[str]]:
    """Which of the modules under ``roots`` each of them imports. An import names the module it
    loads: ``from a import b`` is an edge to ``a`` and, where ``b`` is a module, to ``a.b``; the
    parent packages Python loads on the way are not edges (every submodule would close a cycle
    with its package)."""
    files = {module_name(path, root): (path, root)
             for root in roots for path in root.rglob("*.py")
             if "templates" not in path.relative_to(root).parts}
    return {name: {target for _, target in imported_modules(path, root)
                   if target in files and target != name}
            for name, (path, root) in files.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules of each import cycle (strongly connected component of two or more), sorted."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in order:
            continue
        order[start] = low[start] = len(order)
        stack.append(start)
        pending = [(start, iter(sorted(graph[start])))]
        while pending:
            module, targets = pending[-1]
            target = next(targets, None)
            if target is None:
                pending.pop()
                if pending:
                    low[pending[-1][0]] = min(low[pending[-1][0]], low[module])
                if low[module] == order[module]:
                    component = stack[stack.index(module):]
                    del stack[stack.index(module):]
                    if len(component) > 1:
                        cycles.append(sorted(component))
            elif target not in order:
                order[target] = low[target] = len(order)
                stack.append(target)
                pending.append((target, iter(sorted(graph[target]))))
            elif target in stack:
                low[module] = min(low[module], order[target])
    return sorted(cycles)


def test_no_module_imports_itself_through_others() -> None:
    graph = import_graph(PACKAGE_ROOTS)
    assert {name.split(".")[0] for name in graph} == {
        "rollyard", "rollyard_plugins", "rollyard_codegolf", "rollyard_verifiers"}
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_a_cycle_closed_by_a_lazy_or_type_checking_import(
        tmp_path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.a import A\n")
    (package / "a.py").write_text("class A:\n    def b(self):\n        from pkg import b\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\n"
                                  "if TYPE_CHECKING:\n    from .c import C\n")
    (package / "c.py").write_text("import pkg.b\n")
    (package / "d.py").write_text("from pkg.c import C\n")  # imports the cycle, not in it
    (package / "e.py").write_text("from pkg.a import A\nfrom pkg import c\n")
    assert import_cycles(import_graph([tmp_path])) == [["pkg", "pkg.a"], ["pkg.b", "pkg.c"]]


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
