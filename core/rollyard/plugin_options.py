"""Which plugin owns which options: typed ``Options`` classes on registered classes, and the
``add_options`` hook of plugins written before them. The tables are collected from the
loaded plugins by :meth:`rollyard.plugins.PluginManager.option_tables`."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollyard.configurable import options_prefix
from rollyard.errors import PluginError
from rollyard.options import (
    LegacyOption,
    LegacyOptions,
    OptionSpec,
    build_options,
    legacy_options_class,
    option_specs,
)

#: Commands parse their own arguments; every other kind of class may declare typed options.
NO_OPTIONS_KINDS = ("command",)
#: The owner kind of an observer plugin's options (see PluginManager.observers).
OBSERVER = "observer"


@dataclass
class TypedTable:
    """A typed ``Options`` class and the registered classes that share it."""

    prefix: str
    options_cls: type
    owners: list[str] = field(default_factory=list)
    plugin: str = ""

    @property
    def specs(self) -> list[OptionSpec]:
        return option_specs(self.options_cls, self.prefix)


@dataclass
class LegacyTable:
    """Options a plugin declared with the ``add_options`` hook, and the dataclass generated
    for them (what the plugin's classes receive)."""

    plugin: str
    options: list[LegacyOption]
    options_cls: type[LegacyOptions] = field(init=False)

    def __post_init__(self) -> None:
        self.options_cls = legacy_options_class(self.plugin, self.options)


@dataclass
class OptionTables:
    """Every option table of the loaded plugins, keyed by table name (flag prefix)."""

    typed: dict[str, TypedTable] = field(default_factory=dict)
    legacy: dict[str, LegacyTable] = field(default_factory=dict)

    def add_legacy(self, plugin: str, declared: list[LegacyOption]) -> None:
        """The options ``plugin`` declared with its ``add_options`` hook."""
        if plugin in self.typed and self.typed[plugin].plugin != plugin:
            raise PluginError(f"option table {plugin!r} is declared by plugin {plugin!r} "
                              f"(add_options) and by {self.typed[plugin].owners}")
        self.legacy[plugin] = LegacyTable(plugin, declared)

    def add_typed(self, cls: Any, kind: str, plugin: str) -> None:
        prefix = options_prefix(cls)
        owner = f"{kind} {cls.name!r}"
        table = self.typed.get(prefix)
        if table is None:
            option_specs(cls.Options, prefix)  # a bad declaration fails here, naming it
            self.typed[prefix] = TypedTable(prefix, cls.Options, [owner], plugin)
        elif table.options_cls is not cls.Options:
            raise PluginError(f"options --{prefix}-* are declared twice: by {table.owners} "
                              f"({table.options_cls.__qualname__}) and by {owner} "
                              f"({cls.Options.__qualname__}); share one Options class or set "
                              "options_prefix", entry_point=plugin)
        else:
            table.owners.append(owner)

    def names(self) -> set[str]:
        return set(self.typed) | set(self.legacy)

    def classes(self) -> dict[str, type]:
        """The options class of every table, by table name: what decodes its values."""
        return {**{plugin: t.options_cls for plugin, t in self.legacy.items()},
                **{prefix: t.options_cls for prefix, t in self.typed.items()}}

    def flag_dests(self) -> dict[str, tuple[str, OptionSpec | LegacyOption]]:
        """The argparse ``dest`` of every plugin option: its table and its option."""
        found: dict[str, tuple[str, OptionSpec | LegacyOption]] = {}
        for prefix, table in self.typed.items():
            found.update({spec.flag: (prefix, spec) for spec in table.specs})
        for plugin, legacy in self.legacy.items():
            if plugin not in self.typed:
                found.update({o.action.dest: (plugin, o) for o in legacy.options})
        return found

    def observer_tables(self) -> set[str]:
        """The tables of observer plugins: they change what a run records, never what it
        computes."""
        return {prefix for prefix, table in self.typed.items()
                if all(owner.startswith(OBSERVER + " ") for owner in table.owners)}


def table_of(cls: type, plugin: str) -> str:
    """The option table a registered class of ``plugin`` reads."""
    return options_prefix(cls) if getattr(cls, "Options", None) is not None else plugin


def options_for(cls: type, plugin: str, values: Mapping[str, Any]) -> Any:
    """What a registered class receives as its options: its typed table's instance; for a
    class without ``Options``, its plugin's table (the generated instance of its
    ``add_options`` options, or the typed options a sibling class declares under the plugin's
    name). A table ``values`` lacks (a RunConfig built by hand) gives the defaults."""
    if getattr(cls, "Options", None) is not None:
        prefix = options_prefix(cls)
        table = values.get(prefix)
        return table if table is not None else build_options(cls.Options, prefix, {})
    table = values.get(plugin)  # the plugin's table: add_options values, or typed options
    if table is None:
        return legacy_options_class(plugin, [])()
    return copy.copy(table) if isinstance(table, LegacyOptions) else table  # one per class
