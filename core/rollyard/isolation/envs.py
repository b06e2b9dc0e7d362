"""Build, cache and list the venvs of isolated rollout plugins.

A plugin's venv holds the light core with its worker extra (from the core's own source), Ray at
the driver's version, and the plugin distribution with its declared requirements (or, when the
rollout asks for a venv of its own for a run's options, ``Rollout.isolated_environment``, the
requirements it names and the distribution without its own). It lives in
``$ROLLYARD_ENVS_DIR`` (default ``~/.cache/rollyard/envs``) under a hash of what went into it,
so it is built once and reused until the requirements change. uv reads its own settings from
the environment: ``UV_INDEX``, ``UV_FIND_LINKS``, ``UV_OFFLINE``, ``UV_CACHE_DIR``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from rollyard.errors import ConfigError
from rollyard.isolation.request import IsolatedEnvironment
from rollyard.isolation.requirements import (
    CORE_DISTRIBUTION,
    declared_requirements,
    install_source,
)

ENVS_DIR_VARIABLE = "ROLLYARD_ENVS_DIR"
MARKER = "rollyard-env.json"


class EnvBuildError(ConfigError):
    """An isolated environment could not be built; names the plugin and what failed."""


def envs_dir() -> Path:
    """Where isolated environments are cached."""
    configured = os.environ.get(ENVS_DIR_VARIABLE)
    return Path(configured) if configured else Path.home() / ".cache" / "rollyard" / "envs"


@dataclass(frozen=True)
class EnvSpec:
    """What goes into one venv; its hash names the venv."""

    distribution: str
    requirements: tuple[str, ...]  # the distribution's declared requirements, or the request's
    core: tuple[str, ...]  # the light core's version and requirements with its worker extra
    sources: tuple[str, ...]  # uv install arguments: the core, Ray, the plugin or the request's
    python: str  # the interpreter the venv is made from (the driver's)
    label: str = ""  # a rollout's request (IsolatedEnvironment.label): names the venv
    no_deps: tuple[str, ...] = ()  # uv arguments installing the plugin without its requirements

    @property
    def key(self) -> str:
        data = asdict(self)
        for name in ("label", "no_deps"):  # unset, they leave earlier venvs' names as they were
            if not data[name]:
                del data[name]
        return hashlib.sha256(json.dumps(data).encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        """What messages call it: the request's label, else the distribution."""
        return self.label or self.distribution

    @property
    def path(self) -> Path:
        return envs_dir() / f"{self.name}-{self.key}"

    @property
    def python_path(self) -> Path:
        return self.path / "bin" / "python"


def env_spec(distribution: str, request: IsolatedEnvironment | None = None) -> EnvSpec:
    """The venv spec of an installed plugin distribution (the core's own plugins included):
    with its declared requirements, or, for a rollout's ``request``, with the request's
    requirements and the distribution installed without its own."""
    try:
        requirements = tuple(str(r) for r in declared_requirements(distribution))
    except md.PackageNotFoundError:
        if request is None:
            raise ConfigError(f"{distribution!r} is not an installed distribution, so it has "
                              "no declared requirements to build an isolated environment "
                              "from") from None
        requirements = ()
    sources = [*install_source(CORE_DISTRIBUTION, extras="worker"),
               f"ray=={md.version('ray')}"]
    plugin = install_source(distribution) if distribution != CORE_DISTRIBUTION else []
    core = (md.version(CORE_DISTRIBUTION),
            *(str(r) for r in declared_requirements(CORE_DISTRIBUTION, extras=("worker",))))
    if request is None:
        return EnvSpec(distribution, requirements, core, (*sources, *plugin), sys.executable)
    return EnvSpec(distribution, request.requirements, core,
                   (*sources, *request.requirements), sys.executable, label=request.label,
                   no_deps=(*plugin, *request.no_deps))


def _uv() -> str:
    found = Path(sys.executable).with_name("uv")
    path = str(found) if found.exists() else shutil.which("uv")
    if path is None:
        raise EnvBuildError("isolated rollout environments are built with uv, which is not "
                            "installed: pip install uv")
    return path


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder per venv at a time, across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def is_usable(spec: EnvSpec) -> bool:
    """The venv is complete: its marker matches the spec and its Python imports rollyard."""
    try:
        marker = json.loads((spec.path / MARKER).read_text())
    except (OSError, ValueError):
        return False
    if marker.get("key") != spec.key or not spec.python_path.exists():
        return False
    probe = subprocess.run([str(spec.python_path), "-c", "import rollyard"],
                           capture_output=True, env=_clean_env(), timeout=60)
    return probe.returncode == 0


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}


def ensure_env(spec: EnvSpec, notice: Callable[[str], None]) -> Path:
    """The venv of ``spec``, built unless a usable one is cached; a broken one is rebuilt
    (``notice`` tells the user why the build happens, or that the cached one is used)."""
    with _locked(spec.path.with_name(spec.path.name + ".lock")):
        if is_usable(spec):
            notice(f"using the cached isolated environment {spec.path} of {spec.name!r}")
            return spec.path
        if spec.path.exists():
            notice(f"the isolated environment {spec.path} of {spec.name!r} is "
                   "incomplete or broken; rebuilding it")
            shutil.rmtree(spec.path)
        else:
            notice(f"building the isolated environment of {spec.name!r} in "
                   f"{spec.path} (once)")
        started = time.perf_counter()
        try:
            _build(spec)
        except BaseException:
            shutil.rmtree(spec.path, ignore_errors=True)
            raise
        marker = {"key": spec.key, "spec": asdict(spec),
                  "build_seconds": round(time.perf_counter() - started, 2)}
        (spec.path / MARKER).write_text(json.dumps(marker, indent=2))
    return spec.path


def _build(spec: EnvSpec) -> None:
    uv = _uv()
    python = str(spec.python_path)
    steps = [[uv, "venv", "-q", "--python", spec.python, str(spec.path)],
             [uv, "pip", "install", "-q", "--python", python, *spec.sources]]
    if spec.no_deps:
        steps.append([uv, "pip", "install", "-q", "--no-deps", "--python", python,
                      *spec.no_deps])
    for command in steps:
        done = subprocess.run(command, capture_output=True, text=True, env=_clean_env())
        if done.returncode != 0:
            wanted = ", ".join(spec.requirements) or "no requirements of its own"
            raise EnvBuildError(
                f"cannot build the isolated environment of {spec.name!r} (it "
                f"requires {wanted}): uv failed:\n{done.stderr.strip()[-2000:]}")


def built_envs() -> list[dict[str, object]]:
    """The cached venvs: path, distribution, requirements and build time."""
    found = []
    for marker_path in sorted(envs_dir().glob(f"*/{MARKER}")):
        try:
            marker = json.loads(marker_path.read_text())
            spec = EnvSpec(**{k: tuple(v) if isinstance(v, list) else v
                              for k, v in marker["spec"].items()})
        except (OSError, ValueError, KeyError, TypeError):
            continue
        found.append({"path": str(marker_path.parent), "label": spec.name,
                      "distribution": spec.distribution,
                      "requirements": list(spec.requirements),
                      "build_seconds": marker.get("build_seconds")})
    return found
