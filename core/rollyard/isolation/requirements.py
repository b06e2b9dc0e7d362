"""What a plugin distribution declares it needs, whether this environment has it, and how to
install the distribution elsewhere as it is installed here."""

from __future__ import annotations

import importlib.metadata as md
import json
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

CORE_DISTRIBUTION = "rollyard"


def declared_requirements(distribution: str, extras: tuple[str, ...] = ()) -> list[Requirement]:
    """The run-time requirements of ``distribution`` that apply here (markers evaluated, only
    the given extras), without the core itself."""
    out = []
    for text in md.requires(distribution) or []:
        requirement = Requirement(text)
        if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            continue
        if canonicalize_name(requirement.name) != CORE_DISTRIBUTION:
            out.append(requirement)
    return out


def unmet_requirements(requirements: list[Requirement]) -> list[str]:
    """Each requirement this environment does not satisfy, with what it has instead."""
    unmet = []
    for requirement in requirements:
        try:
            have = md.version(requirement.name)
        except md.PackageNotFoundError:
            unmet.append(f"{requirement} ({requirement.name} is not installed)")
            continue
        if not requirement.specifier.contains(have, prereleases=True):
            unmet.append(f"{requirement} (this environment has {requirement.name} {have})")
    return unmet


def install_source(distribution: str, extras: str = "") -> list[str]:
    """uv arguments installing ``distribution`` as it is installed here: from its local folder
    (editable when it is editable here), its archive URL, or its name and version."""
    # a build folder's stray egg-info can shadow the installed one: prefer what pip installed
    found = [d for d in md.distributions(name=distribution)] or [md.distribution(distribution)]
    dist = next((d for d in found if d.read_text("direct_url.json")), found[0])
    suffix = f"[{extras}]" if extras else ""
    direct = dist.read_text("direct_url.json")
    if direct:
        info = json.loads(direct)
        url = info.get("url", "")
        if url.startswith("file://") and "dir_info" in info:
            path = unquote(urlparse(url).path) + suffix
            return ["-e", path] if info["dir_info"].get("editable") else [path]
        if url:
            return [f"{dist.metadata['Name']}{suffix} @ {url}"]
    return [f"{dist.metadata['Name']}{suffix}=={dist.version}"]
