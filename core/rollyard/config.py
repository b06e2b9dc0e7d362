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


def defaults_from_toml(data: dict[str, Any], parser: argparse.ArgumentParser,
                       source: str) -> dict[str, Any]:
    """Map run.toml keys to parser destinations; an unknown key is an error naming it."""
    known = {action.dest for action in parser._actions}
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            for sub, subvalue in value.items():
                dest = f"{key}{DEST_SEPARATOR}{sub.replace('-', '_')}"
                if dest not in known:
                    raise ConfigError(f"{source}: unknown option [{key}] {sub!r} "
                                      f"(no plugin option --{key}-{sub.replace('_', '-')})")
                defaults[dest] = subvalue
            continue
        dest = key.replace("-", "_")
        if dest not in known:
            raise ConfigError(f"{source}: unknown option {key!r} "
                              f"(no flag --{key.replace('_', '-')})")
        defaults[dest] = value
    return defaults
