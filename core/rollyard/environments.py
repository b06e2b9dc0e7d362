"""The environments of a run: one rollout plugin, or a weighted mix of several.

On the command line ``--rollout-plugin toy:1,codegolf:3`` (``NAME:WEIGHT``; a plain name has
weight 1; a name may be qualified by its distribution, ``rollyard:guess:2``); in a run.toml,
an array of ``[[rollout]]`` tables, which may also give an alias (the
same plugin twice with other options), the plugin's options and per-environment overrides of
some core rollout options. Each environment is trained on its share of every step's groups
(:mod:`rollyard.run.task_source`) and reported under its label (the alias, else the name).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollyard.errors import ConfigError

#: Core options a ``[[rollout]]`` table may override for its environment.
OVERRIDES = ("group_size", "max_new_tokens", "rollout_env", "reward", "rollout_resources")
#: Keys of a ``[[rollout]]`` table.
TABLE_KEYS = frozenset({"name", "alias", "weight", "options", *OVERRIDES})
#: What follows a name's last ':' when it is meant as a weight (else ``DIST:NAME``).
_WEIGHTISH = re.compile(r"^[-+.\d]")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Environment:
    """One environment of a run: a rollout plugin, its weight, and what it changes."""

    #: The rollout plugin (a name ``rollyard plugins`` lists).
    name: str
    weight: float = 1.0
    #: Names the environment in metrics, samples and task ids when the plugin is used twice.
    alias: str | None = None
    #: The plugin's options, spelled as in its run.toml table (over that table's values).
    options: Mapping[str, Any] = field(default_factory=dict)
    #: Per-environment values of core rollout options (``OVERRIDES``).
    overrides: Mapping[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The environment's name in metrics (``reward/mean/<label>``), samples and task ids."""
        return self.alias or self.name

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "weight": self.weight}
        if self.alias:
            data["alias"] = self.alias
        data.update({key: list(value) if isinstance(value, tuple) else value
                     for key, value in self.overrides.items()})
        if self.options:
            data["options"] = dict(self.options)
        return data


def parse_mix(text: str, where: str = "--rollout-plugin") -> tuple[Environment, ...]:
    """The environments of ``NAME[:WEIGHT],…``; a ConfigError naming the bad part."""
    parts = [part.strip() for part in text.split(",")]
    if any(not part for part in parts):
        raise ConfigError(f"{where} {text!r}: an empty name (two commas, or one at an end)")
    environments = []
    for part in parts:
        name, colon, weight = part.rpartition(":")
        if not colon or not _WEIGHTISH.match(weight):  # no weight: DIST:NAME or NAME
            name, weight = part, "1"
        if not name:
            raise ConfigError(f"{where} {part!r}: no name before the weight")
        environments.append(Environment(name=name, weight=_weight(weight, f"{where} {part!r}")))
    return check_mix(environments, where)


def environments_from_tables(tables: Any, source: str) -> tuple[Environment, ...]:
    """The environments of a run.toml's ``[[rollout]]`` array (or config.json's ``rollout``
    list); a ConfigError naming ``source``, the table and the key."""
    if not isinstance(tables, Sequence) or isinstance(tables, str) or not tables:
        raise ConfigError(f"{source}: 'rollout' must be an array of tables ([[rollout]])")
    environments = []
    for i, table in enumerate(tables):
        where = f"{source}: [[rollout]] #{i + 1}"
        if not isinstance(table, Mapping):
            raise ConfigError(f"{where} is not a table")
        unknown = sorted(set(table) - TABLE_KEYS)
        if unknown:
            close = difflib.get_close_matches(unknown[0], TABLE_KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}{hint}; a [[rollout]] table "
                              f"takes {sorted(TABLE_KEYS)}")
        name = table.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: 'name' (the rollout plugin) is required")
        where = f"{source}: [[rollout]] {table.get('alias') or name!r}"
        alias = table.get("alias")
        if alias is not None and (not isinstance(alias, str) or not _LABEL.match(alias)):
            raise ConfigError(f"{where}: alias {alias!r} must be letters, digits, '_', '.' or "
                              "'-'")
        options = table.get("options", {})
        if not isinstance(options, Mapping):
            raise ConfigError(f"{where}: 'options' must be a table ([rollout.options])")
        overrides = {key: tuple(value) if isinstance(value, list) else value
                     for key, value in table.items() if key in OVERRIDES}
        environments.append(Environment(
            name=name, weight=_weight(table.get("weight", 1), f"{where} weight"), alias=alias,
            options=dict(options), overrides=overrides))
    return check_mix(environments, source)


def check_mix(environments: Sequence[Environment], where: str) -> tuple[Environment, ...]:
    """Refuse two environments of one label: a plugin used twice needs an alias."""
    seen: set[str] = set()
    for environment in environments:
        if environment.label in seen:
            raise ConfigError(
                f"{where}: environment {environment.label!r} is given twice; to use a plugin "
                "twice, give each [[rollout]] table its own alias")
        seen.add(environment.label)
    return tuple(environments)


def _weight(value: Any, where: str) -> float:
    try:
        weight = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: weight {value!r} is not a number") from None
    if not math.isfinite(weight) or weight <= 0:
        raise ConfigError(f"{where}: weight {value!r} must be a positive number")
    return weight
