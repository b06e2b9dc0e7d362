"""The versions of a project on the package indexes uv builds isolated venvs from, read from
their PEP 503 simple pages or wheel folders, with uv's own settings: ``UV_DEFAULT_INDEX``,
``UV_INDEX``, ``UV_INDEX_URL``, ``UV_EXTRA_INDEX_URL`` (PyPI when none replaces it),
``UV_FIND_LINKS`` and ``UV_OFFLINE`` (local ones only). Light: urllib and packaging."""

from __future__ import annotations

import functools
import os
import re
import urllib.request
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

PYPI = "https://pypi.org/simple"
TIMEOUT_S = 10
_ANCHOR = re.compile(r"<a\s([^>]*)>", re.I)
_HREF = re.compile(r"""href\s*=\s*["']([^"']+)["']""", re.I)


def index_versions(project: str) -> list[Version] | None:
    """Every version of ``project`` the configured indexes offer (yanked files left out),
    oldest first; None when no index could be read (offline, unreachable)."""
    return _cached(canonicalize_name(project), _settings())


def _settings() -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    env = os.environ
    indexes = [url.split("=", 1)[1] if re.match(r"^[\w.-]+=", url) else url
               for url in env.get("UV_INDEX", "").split()]
    default = env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL") or PYPI
    indexes += [*env.get("UV_EXTRA_INDEX_URL", "").split(), default]
    links = tuple(p for p in re.split(r"[,\s]+", env.get("UV_FIND_LINKS", "")) if p)
    offline = env.get("UV_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    return tuple(indexes), links, offline


@functools.lru_cache(maxsize=16)
def _cached(project: str, settings: tuple[tuple[str, ...], tuple[str, ...], bool]
            ) -> list[Version] | None:
    indexes, links, offline = settings
    pages = [f"{url.rstrip('/')}/{project}/" for url in indexes] + list(links)
    found: set[Version] | None = None
    for page in pages:
        if offline and not _is_local(page):
            continue
        names = _file_names(page)
        if names is None:
            continue
        found = (found or set()) | {v for v in map(_version_of(project), names) if v}
    return None if found is None else sorted(found)


def _is_local(location: str) -> bool:
    return "://" not in location or location.startswith("file:")


def _file_names(location: str) -> list[str] | None:
    """The distribution file names a simple page or a folder lists; None when unreadable."""
    path = Path(unquote(urlparse(location).path)) if _is_local(location) else None
    try:
        if path is not None:
            if (path / "index.html").is_file():
                return _anchors((path / "index.html").read_text(errors="replace"))
            return [p.name for p in path.iterdir()] if path.is_dir() else None
        with urllib.request.urlopen(location, timeout=TIMEOUT_S) as response:
            return _anchors(response.read().decode(errors="replace"))
    except OSError:
        return None


def _anchors(html: str) -> list[str]:
    names = []
    for attributes in _ANCHOR.findall(html):
        href = _HREF.search(attributes)
        if href and "data-yanked" not in attributes:
            names.append(unquote(href.group(1).split("#")[0].rstrip("/").split("/")[-1]))
    return names


def _version_of(project: str):
    def parse(name: str) -> Version | None:
        try:
            if name.endswith(".whl"):
                found, version, *_ = parse_wheel_filename(name)
            else:
                found, version = parse_sdist_filename(name)
        except (InvalidWheelFilename, InvalidSdistFilename):
            return None
        return version if found == project else None
    return parse
