"""What a verifiers environment id names, found without importing it or verifiers: its module's
files, the verifiers API generation its source is written against, and the verifiers
requirement its distribution declares.

Ids as verifiers forms them: a pre-0.4 id (``legacy-arith``, ``owner/legacy-arith``) names the
module ``legacy_arith`` (``-`` to ``_``, the part after the last ``/``); a 0.4 taskset id is an
importable module name, dotted or not (``rollyard_codegolf.verifiers_env``).
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
import importlib.util
import pkgutil
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from rollyard import ConfigError

#: source read per file when looking for the API generation (environments are small modules)
READ_LIMIT = 200_000
#: files of a package read at most
MAX_FILES = 64

_LOAD_ENVIRONMENT = re.compile(r"^\s*(?:async\s+)?def\s+load_environment\s*\(", re.M)
_TASKSET = re.compile(r"\bverifiers\.v1\b|from\s+verifiers\s+import\s+[^\n]*\bv1\b|\bTaskset\b")
_LEGACY_NAMES = re.compile(r"\b(?:SingleTurnEnv|MultiTurnEnv|ToolEnv|StatefulToolEnv|"
                           r"MultiTurnCompletionEnv|Rubric|JudgeRubric|XMLParser|ThinkParser)\b")
_MENTIONS_VERIFIERS = re.compile(r"\bverifiers\b")


class Generation(Enum):
    """The verifiers API an environment is written against."""

    LEGACY = "legacy"  # load_environment() returning SingleTurnEnv, ToolEnv …: verifiers < 0.4
    TASKSET = "taskset"  # a verifiers.v1 Taskset: verifiers >= 0.4

    @property
    def bound(self) -> SpecifierSet:
        """The verifiers versions that have this API."""
        return SpecifierSet("<0.4" if self is Generation.LEGACY else ">=0.4")

    @property
    def described(self) -> str:
        return ("the pre-0.4 verifiers API (load_environment)" if self is Generation.LEGACY
                else "the verifiers 0.4 taskset API (verifiers.v1)")


@dataclass(frozen=True)
class FoundEnvironment:
    """A verifiers environment located on the import path."""

    env_id: str
    module: str  # the importable module the id names
    files: tuple[Path, ...]  # its source files (a package's first MAX_FILES)
    generation: Generation
    distribution: str | None  # the installed distribution holding it (None: on PYTHONPATH)
    requirement: SpecifierSet | None  # that distribution's verifiers requirement (None: none)

    @property
    def location(self) -> Path:
        return self.files[0]


def module_name(env_id: str) -> str:
    """The module an environment id names: a dotted taskset id as it is, else as verifiers'
    pre-0.4 ``load_environment`` forms it."""
    if "." in env_id:
        return env_id
    return env_id.replace("-", "_").split("/")[-1]


def find_environment(env_id: str) -> FoundEnvironment:
    """Locate ``env_id`` and read what it is; ConfigError (one line) when it names nothing or
    nothing verifiers can load."""
    module = module_name(env_id)
    files = module_files(module)
    if not files:
        raise ConfigError(f"verifiers environment {env_id!r}: no importable module "
                          f"{module!r} {_nearest(module)} (install it with pip install "
                          "--no-deps, or put its folder on PYTHONPATH)")
    generation = read_generation(files)
    if generation is None:
        raise ConfigError(f"verifiers environment {env_id!r}: {files[0]} has neither a "
                          "load_environment function (verifiers < 0.4) nor a verifiers.v1 "
                          "Taskset (verifiers >= 0.4)")
    distribution = distribution_of(module.split(".")[0])
    requirement = verifiers_requirement(distribution) if distribution else None
    return FoundEnvironment(env_id, module, files, generation, distribution, requirement)


def module_files(module: str) -> tuple[Path, ...]:
    """The source files of ``module``, found from the import path without importing anything
    (a dotted name is walked folder by folder below its top-level package)."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return ()
    if spec is None:
        return ()
    if not rest:
        if spec.submodule_search_locations is None:
            return (Path(spec.origin),) if spec.origin and spec.origin.endswith(".py") else ()
        return _package_files([Path(p) for p in spec.submodule_search_locations])
    folders = [Path(p) for p in spec.submodule_search_locations or ()]
    for depth, part in enumerate(rest):
        last = depth == len(rest) - 1
        packages = [f / part for f in folders if (f / part).is_dir()]
        if last:
            single = [f / f"{part}.py" for f in folders if (f / f"{part}.py").is_file()]
            return single[:1] if single and not packages else _package_files(packages)
        folders = packages
    return ()


def _package_files(folders: list[Path]) -> tuple[Path, ...]:
    files: list[Path] = []
    for folder in folders:
        init = folder / "__init__.py"
        files += [init] if init.is_file() else []
        files += sorted(p for p in folder.rglob("*.py") if p != init)
    return tuple(files[:MAX_FILES])


def read_generation(files: tuple[Path, ...]) -> Generation | None:
    """The API generation the sources are written against: a ``load_environment`` function is
    the pre-0.4 entry point; else a ``verifiers.v1`` Taskset; else the pre-0.4 class names."""
    text = "\n".join(_read(path) for path in files)
    if _LOAD_ENVIRONMENT.search(text):
        return Generation.LEGACY
    if _TASKSET.search(text):
        return Generation.TASKSET
    if _LEGACY_NAMES.search(text):
        return Generation.LEGACY
    return None


def _read(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return handle.read(READ_LIMIT)
    except OSError:
        return ""


def distribution_of(top_level: str) -> str | None:
    """The installed distribution providing the top-level module (by its files, or, for an
    editable install whose files are elsewhere, by its name)."""
    owners = md.packages_distributions().get(top_level, [])
    if owners:
        return owners[0]
    wanted = canonicalize_name(top_level)
    for dist in md.distributions():
        name = dist.metadata["Name"]
        if name and canonicalize_name(name) == wanted:
            return name
    return None


def verifiers_requirement(distribution: str) -> SpecifierSet | None:
    """The verifiers versions ``distribution`` declares it needs (markers evaluated here)."""
    found = None
    for text in md.requires(distribution) or []:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) != "verifiers":
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        found = requirement.specifier if found is None else found & requirement.specifier
    return found


def _nearest(module: str) -> str:
    """``(nearest installed verifiers environments: a, b)``: the names nearest to ``module``
    among the importable top-level modules (a dotted id: its parent's submodules) whose own
    file looks like a verifiers environment (read, not imported)."""
    parent = module.rpartition(".")[0]
    if parent:
        names = [f"{parent}.{m.name}" for folder in _search_folders(parent)
                 for m in pkgutil.iter_modules([str(folder)])]
    else:
        names = [m.name for m in pkgutil.iter_modules() if m.name not in _NOT_ENVIRONMENTS]
    close = difflib.get_close_matches(module, names, n=12, cutoff=0.4)
    found = [n for n in close if _looks_like_environment(n)][:3]
    if not found:
        return "(no installed verifiers environment has a similar name)"
    return f"(nearest installed verifiers environments: {', '.join(found)})"


_NOT_ENVIRONMENTS = {"verifiers", "rollyard_verifiers", "renderers"}


def _search_folders(package: str) -> list[Path]:
    files = module_files(package)
    return [files[0].parent] if files and files[0].name == "__init__.py" else []


def _looks_like_environment(module: str) -> bool:
    """The module's own file (a package's ``__init__``) mentions verifiers and defines
    ``load_environment`` or names a Taskset."""
    files = module_files(module)[:1] if "." in module else _top_file(module)
    return bool(files) and bool(_MENTIONS_VERIFIERS.search(_read(files[0]))) \
        and read_generation(files) is not None


def _top_file(module: str) -> tuple[Path, ...]:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return ()
    origin = spec.origin if spec is not None else None
    return (Path(origin),) if origin and origin.endswith(".py") else ()
