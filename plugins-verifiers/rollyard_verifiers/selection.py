"""The venv a verifiers environment needs (``VerifiersRollout.isolated_environment``).

A 0.4 taskset runs in the plugin's own environment (None: today's path). A pre-0.4
(``load_environment``) environment gets a venv with the newest verifiers release of its API
generation that satisfies its own requirement (``verifiers>=0.3.1`` on an environment calling
``vf.SingleTurnEnv`` gets 0.3.1, not 0.4), or ``==--verifiers-version``; the package index is
asked which releases exist, so a requirement no release meets is one line naming both.
"""

from __future__ import annotations

import importlib.metadata as md
import re

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from rollyard import ConfigError, IsolatedEnvironment
from rollyard.isolation.requirements import declared_requirements, install_source

from rollyard_verifiers.index import index_versions
from rollyard_verifiers.resolve import FoundEnvironment, Generation, find_environment

PLUGIN_DISTRIBUTION = "rollyard-verifiers"
#: what a venv of the pre-0.4 API holds besides the plugin's own requirements: renderers below
#: the pre-release that breaks 0.2.x-0.3.x (/work/shared/notes/verifiers.md)
LEGACY_REQUIREMENTS = ("renderers>=0.1.8,<0.1.11",)


def plugin_requirements() -> tuple[str, ...]:
    """The plugin's declared requirements but verifiers (it is installed --no-deps, with the
    verifiers chosen here): the bridge's aiohttp, uv for verifiers' harness programs …"""
    return tuple(str(r) for r in declared_requirements(PLUGIN_DISTRIBUTION)
                 if canonicalize_name(r.name) != "verifiers")


def environment_request(env_id: str, version: str | None = None) -> IsolatedEnvironment | None:
    """The venv ``env_id`` needs, or None when it runs where the plugin is installed (a 0.4
    taskset, unless ``version`` names another verifiers than the one here). ConfigError, one
    line, for an id naming nothing, a version of the wrong API generation, or a requirement no
    release on the index meets."""
    found = find_environment(env_id)
    if found.generation is Generation.TASKSET and version in (None, _version()):
        return None
    pin = verifiers_spec(found, version, index_versions("verifiers"))
    extra = (*(LEGACY_REQUIREMENTS if found.generation is Generation.LEGACY else ()),
             *plugin_requirements())
    own, source = _environment_packages(found)
    requirements = (*own, f"verifiers{pin}", *extra)
    shown = pin.removeprefix("==")
    label = f"verifiers-{re.sub(r'[^A-Za-z0-9.]+', '_', shown).strip('_')}-{found.module}"
    flag = f" --verifiers-version {version}" if version else ""
    return IsolatedEnvironment(
        label=label, requirements=requirements, no_deps=source,
        reason=(f"verifiers environment {env_id!r} ({found.location}) is written against "
                f"{found.generation.described} and needs verifiers{pin}, which the core's "
                f"environment does not have ({_installed()}): run it in a venv of its own, "
                f"rollyard train --rollout-plugin verifiers --vf-env {env_id}{flag} "
                "--rollout-env isolated (auto does the same)"))


def _environment_packages(found: FoundEnvironment) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The environment distribution's requirements other than verifiers, and how to install
    the distribution itself (--no-deps, so the verifiers chosen here wins over its own pin).
    An environment without metadata (on PYTHONPATH) brings none: PYTHONPATH reaches the
    workers."""
    if found.distribution is None:
        return (), ()
    own = tuple(str(r) for r in declared_requirements(found.distribution)
                if canonicalize_name(r.name) != "verifiers")
    return own, tuple(install_source(found.distribution))


def verifiers_spec(found: FoundEnvironment, version: str | None,
                   available: list[Version] | None) -> str:
    """``==X`` for ``--verifiers-version X`` or the newest release of the environment's API
    generation that satisfies its own requirement; that intersection as a specifier when the
    index cannot be read (uv then picks the newest)."""
    bound = found.generation.bound
    if version is not None:
        try:
            wanted = Version(version)
        except InvalidVersion:
            raise ConfigError(f"--verifiers-version {version!r} is not a version") from None
        if not bound.contains(wanted, prereleases=True):
            raise ConfigError(
                f"--verifiers-version {version}: verifiers environment {found.env_id!r} is "
                f"written against {found.generation.described}, which only verifiers{bound} "
                "has")
        if available is not None and wanted not in available:
            raise ConfigError(f"--verifiers-version {version}: the package index has no "
                              f"verifiers {version}; it has {_releases(available)}")
        return f"=={version}"
    own = found.requirement
    combined = bound if own is None else own & bound
    if available is None:
        return str(combined)
    matching = list(combined.filter(available))
    if not matching:
        owner = f"its distribution {found.distribution!r} requires verifiers{own}"
        raise ConfigError(
            f"verifiers environment {found.env_id!r}: {owner} and it is written against "
            f"{found.generation.described} (verifiers{bound}); no release satisfies both "
            f"(verifiers{combined}): the package index has {_releases(available)}"
            if own is not None else
            f"verifiers environment {found.env_id!r} is written against "
            f"{found.generation.described}, but the package index has no verifiers{bound}: "
            f"it has {_releases(available)}")
    return f"=={max(matching)}"


def _releases(available: list[Version]) -> str:
    finals = [v for v in available if not v.is_prerelease and not v.is_devrelease] or available
    return ", ".join(str(v) for v in finals) if finals else "none at all"


def _version() -> str | None:
    """The verifiers installed here."""
    try:
        return md.version("verifiers")
    except md.PackageNotFoundError:
        return None


def _installed() -> str:
    return f"verifiers {_version()}" if _version() else "no verifiers"

