"""``rollyard new-plugin NAME [DIR] [--kind KIND]``: start a plugin package from rollyard's
template.

The template (``rollyard/templates/rollyard-plugin``, shipped as package data) is a complete,
installable single-turn environment named ``myenv``; ``--kind multi-turn`` lays the files of
``rollyard/templates/multi-turn`` over it (a step-style ``TextEnv`` that scores itself, so
without the reward module). Copying renames the distribution (``rollyard-NAME``), the package
(``rollyard_NAME``), the entry point, the option prefix (``--NAME-``), the rollout, the reward
and the classes.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from types import SimpleNamespace

from rollyard.errors import ConfigError
from rollyard.interfaces import Command

TEMPLATE_NAME = "myenv"
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
#: Build and cache leftovers that are never copied.
IGNORED = ("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache", ".ruff_cache", "build", "dist")


@dataclass(frozen=True)
class Kind:
    """A kind of plugin: the template folder laid over the base one (None: the base as is)
    and the base files it leaves out."""

    overlay: str | None = None
    omit: tuple[str, ...] = ()


KINDS = {"single-turn": Kind(),
         "multi-turn": Kind("multi-turn", omit=("src/rollyard_myenv/reward.py",))}


def template_dir() -> Path:
    """Where the template lives in the rollyard source tree."""
    import rollyard

    return Path(rollyard.__file__).resolve().parent / "templates" / "rollyard-plugin"


def replacements(name: str) -> list[tuple[str, str]]:
    """Template spellings and what they become for plugin ``name``, longest first."""
    ident = name.replace("-", "_")
    camel = "".join(part.capitalize() for part in name.split("-"))
    return [(f"rollyard_{TEMPLATE_NAME}", f"rollyard_{ident}"),
            (TEMPLATE_NAME.capitalize(), camel), (TEMPLATE_NAME, name)]


def rename(text: str, name: str) -> str:
    for old, new in replacements(name):
        text = text.replace(old, new)
    return text


def new_plugin(name: str, destination: Path | None = None,
               template: Path | None = None, kind: str = "single-turn") -> Path:
    """Copy the template of ``kind`` to ``destination`` (default ``./rollyard-NAME``) as
    plugin ``name``; return the new package's folder. Raises ConfigError for a bad name, kind
    or a used folder."""
    if not NAME_PATTERN.fullmatch(name):
        raise ConfigError(f"plugin name {name!r}: use lowercase letters, digits and single "
                          "dashes, starting with a letter (it becomes --NAME-* options and "
                          "the package rollyard_NAME)")
    if kind not in KINDS:
        raise ConfigError(f"--kind {kind!r}: choose one of {sorted(KINDS)}")
    source = template or template_dir()
    if not (source / "pyproject.toml").is_file():
        raise ConfigError(f"plugin template not found at {source}; pass --template DIR")
    target = destination or Path(f"rollyard-{name}")
    if target.exists() and any(target.iterdir()):
        raise ConfigError(f"{target} already exists and is not empty; choose another DIR")
    files = _files(source, KINDS[kind].omit)
    if KINDS[kind].overlay is not None:
        files |= _files(template_dir().parent / KINDS[kind].overlay)
    for relative, path in sorted(files.items()):
        copy = target / rename(relative, name)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(rename(path.read_text(encoding="utf-8"), name), encoding="utf-8")
    return target


def _files(folder: Path, omit: tuple[str, ...] = ()) -> dict[str, Path]:
    """The files of a template folder by relative path, build leftovers and ``omit`` left
    out."""
    return {str(path.relative_to(folder)): path for path in folder.rglob("*")
            if path.is_file() and str(path.relative_to(folder)) not in omit
            and not any(fnmatch(part, pattern) for part in path.relative_to(folder).parts
                        for pattern in IGNORED)}


class NewPluginCommand(Command):
    """``rollyard new-plugin NAME [DIR]``."""

    name = "new-plugin"
    help = "start a plugin package (an environment with tests) from the template"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("plugin", metavar="NAME",
                            help="plugin name: entry point, option prefix, rollout name")
        parser.add_argument("directory", metavar="DIR", nargs="?", type=Path,
                            help="where to create it (default: ./rollyard-NAME)")
        parser.add_argument("--template", metavar="DIR", type=Path,
                            help="copy this template instead of rollyard's own")
        parser.add_argument("--kind", choices=sorted(KINDS), default="single-turn",
                            help="single-turn: one reply per episode, scored by a reward; "
                                 "multi-turn: a step-style environment (reset/step) that "
                                 "scores itself")

    def run(self, args: SimpleNamespace) -> int:
        target = new_plugin(args.plugin, args.directory, args.template, args.kind)
        print(f"created {target}: plugin {args.plugin!r}. Next:\n"
              f"  pip install -e {target}\n"
              f"  rollyard check-plugin {args.plugin}\n"
              f"  cd {target} && pytest")
        return 0
