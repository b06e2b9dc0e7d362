"""Which plugin owns which options: typed ``Options`` classes on registered classes, and the
``add_options`` hook of plugins written before them."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rollyard.errors import PluginError
from rollyard.options import LegacyOption, OptionSpec, option_specs

if TYPE_CHECKING:
    from rollyard.plugins import PluginManager

#: Commands parse their own arguments; every other kind of class may declare typed options.
NO_OPTIONS_KINDS = ("command",)
#: The owner kind of an observer plugin's options (see PluginManager.observers).
OBSERVER = "observer"


def options_prefix(cls: type) -> str:
    """The table name and flag prefix of a class's typed options: ``options_prefix`` if set,
    else its registered ``name``."""
    return getattr(cls, "options_prefix", "") or cls.name


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
    """Options a plugin declared with the ``add_options`` hook."""

    plugin: str
    options: list[LegacyOption]

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.action.default for o in self.options}


@dataclass
class OptionTables:
    """Every option table of the loaded plugins, keyed by table name (flag prefix)."""

    typed: dict[str, TypedTable] = field(default_factory=dict)
    legacy: dict[str, LegacyTable] = field(default_factory=dict)

    @classmethod
    def from_manager(cls, manager: PluginManager,
                     parser: argparse.ArgumentParser | None = None,
                     plugins: Iterable[str] | None = None) -> OptionTables:
        """Collect the tables; legacy options are added to ``parser`` (a throwaway one if
        None). ``plugins`` limits both to those plugins (entry-point names)."""
        tables = cls()
        wanted = None if plugins is None else set(plugins)
        for kind in manager.registry:
            if kind in NO_OPTIONS_KINDS:
                continue
            for name in manager.names(kind):
                record = manager.owner(kind, name)
                option_cls = getattr(manager.get(kind, name), "Options", None)
                if option_cls is None or (wanted is not None and record.name not in wanted):
                    continue
                tables.add_typed(manager.get(kind, name), kind, record.name)
        for plugin, observer in manager.observers().items():
            if wanted is None or plugin in wanted:
                tables.add_typed(observer, OBSERVER, plugin)
        groups = manager.hooks.add_options(parser or argparse.ArgumentParser(add_help=False),
                                           plugins=wanted)
        for plugin, group in groups.items():
            if plugin in tables.typed and tables.typed[plugin].plugin != plugin:
                raise PluginError(f"option table {plugin!r} is declared by plugin {plugin!r} "
                                  f"(add_options) and by {tables.typed[plugin].owners}")
            tables.legacy[plugin] = LegacyTable(plugin, group.declared)
        return tables

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

    def observer_tables(self) -> set[str]:
        """The tables of observer plugins: they change what a run records, never what it
        computes."""
        return {prefix for prefix, table in self.typed.items()
                if all(owner.startswith(OBSERVER + " ") for owner in table.owners)}


def observer_tables(manager: PluginManager) -> set[str]:
    """The option tables of the loaded observer plugins."""
    return {options_prefix(observer) for observer in manager.observers().values()}


def table_of(cls: type, plugin: str) -> str:
    """The option table a registered class of ``plugin`` reads."""
    return options_prefix(cls) if getattr(cls, "Options", None) is not None else plugin


def options_for(cls: type, plugin: str, values: Mapping[str, Any]) -> Any:
    """What a registered class receives as its options: its typed table's instance; for a
    class without ``Options``, its plugin's table (the ``add_options`` dict, or the typed
    options a sibling class declares under the plugin's name)."""
    if getattr(cls, "Options", None) is not None:
        return values[options_prefix(cls)]
    table = values.get(plugin, {})  # the plugin's table: add_options values, or typed options
    return dict(table) if isinstance(table, Mapping) else table
