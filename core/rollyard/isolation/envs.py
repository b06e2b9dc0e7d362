"""Build, cache and list the venvs of isolated rollout plugins.

A plugin's venv holds the light core with its worker extra (from the core's own source), Ray at
the driver's version, and the plugin distribution with its declared requirements (or, when the
rollout asks for a venv of its own for a run's options, ``Rollout.isolated_environment``, the
requirements it names and the distribution without its own). It lives in
``$ROLLYARD_ENVS_DIR`` (default ``~/.cache/rollyard/envs``) under a hash of what went into it,
so it is built once and reused until the requirements change. uv reads its own settings from
the environment: ``UV_INDEX``, ``UV_FIND_LINKS``, ``UV_OFFLINE``, ``UV_CACHE_DIR``.

A venv is made of two layers. The packages (everything but the distributions installed from a
folder on this machine, such as a checkout of the core or of a plugin) go into a shared layer
under ``shared/``, named by a hash that leaves those folders out; the venv itself holds only the
folder installs (without their dependencies, which the shared layer has) and a ``.pth`` file
that puts the shared layer's site-packages on its path. So a second checkout, or a fresh clone
in CI, builds a venv in a second or two instead of installing the packages again.
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

from packaging.requirements import Requirement

from rollyard.errors import ConfigError
from rollyard.isolation.request import IsolatedEnvironment
from rollyard.isolation.requirements import (
    CORE_DISTRIBUTION,
    declared_requirements,
    install_source,
)

ENVS_DIR_VARIABLE = "ROLLYARD_ENVS_DIR"
MARKER = "rollyard-env.json"
SHARED_LAYERS = "shared"
LINK_FILE = "_rollyard_shared_layer.pth"
#: How layers are built, in every key: a change renames (so rebuilds) the layers built before.
#: 2: the shared layer's modules are compiled at install time (where PYTHONDONTWRITEBYTECODE is
#: set, Python never writes them, and every worker start compiled each module again).
LAYOUT = 2


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
    sources: tuple[str, ...]  # uv install arguments of the shared layer: Ray, the requirements
    python: str  # the interpreter the venv is made from (the driver's, resolved)
    label: str = ""  # a rollout's request (IsolatedEnvironment.label): names the venv
    no_deps: tuple[str, ...] = ()  # uv arguments installing the plugin without its requirements
    local: tuple[str, ...] = ()  # uv arguments of the folder installs (the core, a plugin)

    @property
    def key(self) -> str:
        """Names the venv: everything that goes into it."""
        return _digest(asdict(self))

    @property
    def shared_key(self) -> str:
        """Names the shared layer: everything but what the venv installs without dependencies."""
        data = asdict(self)
        del data["no_deps"], data["local"]
        return _digest(data)

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

    @property
    def shared_path(self) -> Path:
        return envs_dir() / SHARED_LAYERS / f"{self.name}-{self.shared_key}"


def _digest(data: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps({"layout": LAYOUT, **data}).encode()).hexdigest()[:16]


def env_spec(distribution: str, request: IsolatedEnvironment | None = None) -> EnvSpec:
    """The venv spec of an installed plugin distribution (the core's own plugins included):
    with its declared requirements, or, for a rollout's ``request``, with the request's
    requirements and the distribution installed without its own."""
    try:
        requirements = tuple(_applying(declared_requirements(distribution)))
    except md.PackageNotFoundError:
        if request is None:
            raise ConfigError(f"{distribution!r} is not an installed distribution, so it has "
                              "no declared requirements to build an isolated environment "
                              "from") from None
        requirements = ()
    core_requirements = _applying(declared_requirements(CORE_DISTRIBUTION, extras=("worker",)))
    core = (md.version(CORE_DISTRIBUTION), *core_requirements)
    sources, local = [f"ray=={md.version('ray')}"], []
    _place(install_source(CORE_DISTRIBUTION, extras="worker"), core_requirements, sources, local)
    plugin = install_source(distribution) if distribution != CORE_DISTRIBUTION else []
    if request is None:
        _place(plugin, list(requirements), sources, local)
        return EnvSpec(distribution, requirements, core, tuple(sources), _interpreter(),
                       local=tuple(local))
    return EnvSpec(distribution, request.requirements, core,
                   (*sources, *request.requirements), _interpreter(), label=request.label,
                   no_deps=(*plugin, *request.no_deps), local=tuple(local))


def _applying(requirements: list[Requirement]) -> list[str]:
    """Requirements whose markers held here, without the markers (an ``extra == ...`` marker
    would not hold when uv installs the requirement on its own)."""
    out = []
    for requirement in requirements:
        requirement.marker = None
        out.append(str(requirement))
    return out


def _interpreter() -> str:
    """The Python the driver's venv was made from: the same for every checkout using it."""
    return os.path.realpath(sys.executable)


def _place(source: list[str], requirements: list[str], shared: list[str],
           local: list[str]) -> None:
    """A folder install goes into the venv itself and its requirements into the shared layer;
    anything else (a name and version, an archive URL) goes into the shared layer as it is."""
    if source and (source[0] == "-e" or Path(source[0].split("[")[0]).is_dir()):
        local.extend(source)
        shared.extend(requirements)
    else:
        shared.extend(source)


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
    """The venv is complete: its marker and its shared layer's match the spec and its Python
    imports rollyard."""
    if not (_marked(spec.path, spec.key) and _marked(spec.shared_path, spec.shared_key)):
        return False
    probe = subprocess.run([str(spec.python_path), "-c", "import rollyard"],
                           capture_output=True, env=_clean_env(), timeout=60)
    return probe.returncode == 0


def _marked(path: Path, key: str) -> bool:
    try:
        marker = json.loads((path / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("key") == key and (path / "bin" / "python").exists()


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
        with _locked(spec.shared_path.with_name(spec.shared_path.name + ".lock")):
            if not _marked(spec.shared_path, spec.shared_key):
                notice(f"building the isolated environment of {spec.name!r} in "
                       f"{spec.path} (once)")
                _build_marked(spec.shared_path, spec, spec.shared_key, _build_shared)
        _build_marked(spec.path, spec, spec.key, _build_venv)
    return spec.path


def _build_marked(path: Path, spec: EnvSpec, key: str,
                  build: Callable[[EnvSpec], None]) -> None:
    """Build one layer from scratch and mark it complete; a failed build leaves nothing."""
    shutil.rmtree(path, ignore_errors=True)
    started = time.perf_counter()
    try:
        build(spec)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    marker = {"key": key, "spec": asdict(spec),
              "build_seconds": round(time.perf_counter() - started, 2)}
    (path / MARKER).write_text(json.dumps(marker, indent=2))


def _build_shared(spec: EnvSpec) -> None:
    python = str(spec.shared_path / "bin" / "python")
    _run_uv(spec, ["venv", "-q", "--python", spec.python, str(spec.shared_path)],
            ["pip", "install", "-q", "--compile-bytecode", "--python", python, *spec.sources])


def _build_venv(spec: EnvSpec) -> None:
    python = str(spec.python_path)
    _run_uv(spec, ["venv", "-q", "--python", spec.python, str(spec.path)])
    shared = _site_packages(spec.shared_path / "bin" / "python")
    link = Path(_site_packages(spec.python_path)) / LINK_FILE
    link.write_text(f"import site; site.addsitedir({shared!r})\n")
    if spec.local or spec.no_deps:
        _run_uv(spec, ["pip", "install", "-q", "--no-deps", "--python", python,
                       *spec.local, *spec.no_deps])


def _site_packages(python: Path) -> str:
    done = subprocess.run([str(python), "-c",
                           "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, env=_clean_env(), check=True)
    return done.stdout.strip()


def _run_uv(spec: EnvSpec, *commands: list[str]) -> None:
    uv = _uv()
    for command in commands:
        done = subprocess.run([uv, *command], capture_output=True, text=True, env=_clean_env())
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
