"""Run configuration: ``--config run.toml`` underneath, command-line flags on top.

A run.toml holds core options as top-level keys (``rollout_plugin = "toy"``, ``steps = 10``)
and a table per plugin for that plugin's options (``[codegolf] tasks = "my.json"``).
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

from rollyard.errors import ConfigError
from rollyard.options import DEST_SEPARATOR


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {exc}") from None


def _checked(action: argparse.Action, value: Any, where: str) -> Any:
    """A toml value as its flag would have parsed it: through the option's type and choices,
    which argparse does not apply to defaults; item by item for repeatable options."""
    if isinstance(value, list) and isinstance(action, argparse._AppendAction):
        return [_checked(action, item, where) for item in value]
    if action.type is not None and not isinstance(value, (bool, dict, list)):
        try:
            value = action.type(str(value))
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if action.choices is not None and value not in action.choices:
        raise ConfigError(f"{where}: {value!r} is not one of {sorted(action.choices)}")
    return value


def defaults_from_toml(data: dict[str, Any], parser: argparse.ArgumentParser,
                       source: str) -> dict[str, Any]:
    """Map run.toml keys to parser destinations; an unknown key, or a value its flag would
    reject, is an error naming it."""
    actions = {action.dest: action for action in parser._actions}
    known = set(actions)
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            for sub, subvalue in value.items():
                dest = f"{key}{DEST_SEPARATOR}{sub.replace('-', '_')}"
                if dest not in known:
                    raise ConfigError(f"{source}: unknown option [{key}] {sub!r} "
                                      f"(no plugin option --{key}-{sub.replace('_', '-')})")
                defaults[dest] = _checked(actions[dest], subvalue, f"{source}: [{key}] {sub!r}")
            continue
        dest = key.replace("-", "_")
        if dest not in known:
            raise ConfigError(f"{source}: unknown option {key!r} "
                              f"(no flag --{key.replace('_', '-')})")
        defaults[dest] = _checked(actions[dest], value, f"{source}: {key!r}")
    return defaults


def repeated_on_command_line(parser: argparse.ArgumentParser,
                             args: argparse.Namespace) -> dict[str, list[Any]]:
    """Values of repeatable options (``--reward``) given on the command line. argparse appends
    them to their default, so they are put back after run.toml defaults are applied: a list on
    the command line replaces the toml's list instead of extending it."""
    return {action.dest: getattr(args, action.dest) for action in parser._actions
            if isinstance(action, argparse._AppendAction)
            and getattr(args, action.dest, None) is not action.default}
