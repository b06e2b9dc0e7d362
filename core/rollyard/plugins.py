"""Discover, load and index plugins from the ``rollyard`` entry-point group."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import logging
import os
import sys
import types as pytypes
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pluggy

import rollyard.hookspecs as hookspecs
from rollyard.algorithms import Algorithm
from rollyard.configurable import options_prefix
from rollyard.errors import PluginError, UnknownPluginError
from rollyard.interfaces import Command, Engine, Reward, Rollout, Transport
from rollyard.options import PluginOptionGroup
from rollyard.plugin_options import NO_OPTIONS_KINDS, OBSERVER, OptionTables

ENTRY_POINT_GROUP = "rollyard"
CORE_DISTRIBUTION = "rollyard"
log = logging.getLogger("rollyard.plugins")

#: registration hook -> (kind shown to users, base class a registered class must derive from)
KINDS: dict[str, tuple[str, type]] = {
    "register_rollouts": ("rollout", Rollout),
    "register_transports": ("transport", Transport),
    "register_rewards": ("reward", Reward),
    "register_engines": ("engine", Engine),
    "register_commands": ("command", Command),
    "register_algorithms": ("algorithm", Algorithm),
}


class PluginWarning(UserWarning):
    """A plugin failed to load or register; the others still work."""


def qualified(distribution: str, name: str) -> str:
    """The spelling that always names one distribution's plugin: ``DIST:NAME``."""
    return f"{distribution}:{name}"


@dataclass
class PluginRecord:
    """What ``rollyard plugins`` shows about one plugin."""

    name: str
    distribution: str
    version: str
    entry_point: str
    hooks: list[str] = field(default_factory=list)
    registers: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "distribution": self.distribution, "version": self.version,
                "entry_point": self.entry_point, "hooks": self.hooks,
                "registers": self.registers, "errors": self.errors}


@dataclass
class Registered:
    cls: type
    plugin: PluginRecord


def _names_from_env(variable: str, environ: Mapping[str, str]) -> set[str] | None:
    raw = environ.get(variable)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


class PluginManager:
    """Loads plugins (from entry points or in-process) and indexes what they register.

    ``ROLLYARD_LOAD_PLUGINS`` (allow list) and ``ROLLYARD_DISABLE_PLUGINS`` (block list) filter
    entry points by name; ``ROLLYARD_TRACE_PLUGINS=1`` logs every hook call to stderr.
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        environ = os.environ if environ is None else environ
        self.pm = pluggy.PluginManager("rollyard")
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}
        self.registry: dict[str, dict[str, Registered]] = {kind: {} for kind, _ in KINDS.values()}
        #: the first registration of a name that a second distribution registered too
        self._shared: dict[str, dict[str, Registered]] = {kind: {} for kind, _ in KINDS.values()}
        #: plain names that two third-party distributions register: their qualified spellings
        self._ambiguous: dict[str, dict[str, list[str]]] = {kind: {}
                                                            for kind, _ in KINDS.values()}
        self._allow = _names_from_env("ROLLYARD_LOAD_PLUGINS", environ)
        self._block = _names_from_env("ROLLYARD_DISABLE_PLUGINS", environ) or set()
        self._loaded_all = False
        if environ.get("ROLLYARD_TRACE_PLUGINS", "") not in ("", "0"):
            self._enable_tracing()
        self.hooks = HookFacade(self.pm)

    # ------------------------------------------------------------------ loading

    def entry_points(self) -> list[md.EntryPoint]:
        eps = [ep for ep in md.entry_points(group=ENTRY_POINT_GROUP)
               if (self._allow is None or ep.name in self._allow) and ep.name not in self._block]
        return sorted(eps, key=lambda ep: (ep.dist.name != CORE_DISTRIBUTION if ep.dist else True,
                                           ep.name))

    def load_all(self) -> None:
        """Import every allowed entry point; a broken one is recorded and warned about."""
        if self._loaded_all:
            return
        for ep in self.entry_points():
            self._load_entry_point(ep)
        self._loaded_all = True

    def load_for_run(self, wanted: Iterable[tuple[str, str]]) -> None:
        """Load the core's own plugins and the entry points named like the wanted plugins;
        fall back to every entry point only when a wanted (kind, name) is still missing."""
        wanted = list(wanted)
        names = {name for _, name in wanted}
        for ep in self.entry_points():
            if (ep.dist and ep.dist.name == CORE_DISTRIBUTION) or ep.name in names:
                self._load_entry_point(ep)
        if any(name not in self.registry[kind] for kind, name in wanted):
            self.load_all()

    def _load_entry_point(self, ep: md.EntryPoint) -> None:
        dist = ep.dist.name if ep.dist else "(unknown)"
        name = ep.name
        loaded = self.records.get(name)
        if loaded is not None:
            if (loaded.distribution, loaded.entry_point) == (dist, ep.value):
                return
            # another distribution's plugin of this name: loaded under its qualified name
            name = qualified(dist, ep.name)
            if name in self.records:
                return
        record = PluginRecord(name, dist, ep.dist.version if ep.dist else "", ep.value)
        self.records[name] = record
        try:
            module = ep.load()
        except Exception as exc:
            self._fail(record, f"importing {ep.value!r} raised {type(exc).__name__}: {exc}")
            return
        self._register(module, record)

    def register(self, plugin: object, name: str | None = None,
                 distribution: str = "(in-process)") -> PluginRecord:
        """Register a plugin object in-process (tests, notebooks); returns its record."""
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        record = PluginRecord(name, distribution, "", f"{name} (in-process)")
        self.records[name] = record
        self._register(plugin, record)
        return record

    def unregister(self, name: str) -> None:
        """Remove an in-process plugin and everything it registered."""
        record = self.records.pop(name, None)
        if self.pm.get_plugin(name) is not None:
            self.pm.unregister(name=name)
        for table in self.registry.values():
            for key in [k for k, v in table.items() if v.plugin is record]:
                del table[key]

    def _register(self, plugin: object, record: PluginRecord) -> None:
        try:
            self.pm.register(plugin, name=record.name)
        except (pluggy.PluginValidationError, ValueError) as exc:
            self._fail(record, f"invalid hook implementation: {exc}")
            return
        unknown = self._unknown_hooks(plugin)
        record.hooks = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or [])
        if unknown:
            self._fail(record, f"unknown hook(s) {sorted(unknown)}; known hooks are "
                               f"{sorted(self._spec_names())}")
            self.pm.unregister(plugin)
            return
        for hook_name, (kind, base) in KINDS.items():
            if hook_name not in record.hooks:
                continue
            caller = self.pm.subset_hook_caller(
                hook_name, remove_plugins=[p for p in self.pm.get_plugins() if p is not plugin])
            try:
                caller(register=self._make_register(record, kind, base))
            except PluginError as exc:
                self._fail(record, str(exc))
            except Exception as exc:
                self._fail(record, f"{hook_name} raised {type(exc).__name__}: {exc}")

    def _spec_names(self) -> set[str]:
        return {name for name in dir(hookspecs)
                if isinstance(getattr(hookspecs, name), pytypes.FunctionType)
                and hasattr(getattr(hookspecs, name), "rollyard_spec")}

    def _unknown_hooks(self, plugin: object) -> set[str]:
        marked = {name for name in dir(plugin)
                  if getattr(getattr(plugin, name, None), "rollyard_impl", None) is not None}
        return marked - self._spec_names()

    def _make_register(self, record: PluginRecord, kind: str, base: type) -> Callable[[type], None]:
        def register(cls: type) -> None:
            where = {"distribution": record.distribution, "entry_point": record.entry_point}
            if not isinstance(cls, type) or not issubclass(cls, base):
                raise PluginError(f"registered {cls!r} as a {kind}, but it is not a subclass of "
                                  f"rollyard.{base.__name__}", **where)
            name = getattr(cls, "name", "")
            if not isinstance(name, str) or not name:
                raise PluginError(f"{kind} class {cls.__qualname__} has no 'name'", **where)
            taken = self.registry[kind].get(name) or self._shared[kind].get(name)
            if taken is not None and taken.plugin.distribution == record.distribution:
                raise PluginError(
                    f"{kind} name {name!r} is registered twice by {record.distribution!r} "
                    f"(entry points {taken.plugin.entry_point!r} and {record.entry_point!r})",
                    **where)
            if taken is not None:
                self._share_name(kind, name, taken, Registered(cls, record))
            else:
                self.registry[kind][name] = Registered(cls, record)
            record.registers.setdefault(kind, []).append(name)
        return register

    def _share_name(self, kind: str, name: str, taken: Registered, new: Registered) -> None:
        """Two distributions register ``name``: both are reachable as ``DIST:NAME``; the
        plain name stays with a third-party plugin over a built-in example of the core, and
        with neither of two third-party plugins (:meth:`get` then names both spellings)."""
        table = self.registry[kind]
        first = self._shared[kind].setdefault(name, taken)
        for entry in (first, new):
            spelled = qualified(entry.plugin.distribution, name)
            table[spelled] = Registered(_renamed(entry.cls, spelled), entry.plugin)
        core = [e for e in (first, new) if e.plugin.distribution == CORE_DISTRIBUTION]
        others = [e for e in (first, new) if e.plugin.distribution != CORE_DISTRIBUTION]
        if core and len(others) == 1 and name not in self._ambiguous[kind]:
            table[name] = others[0]
            _notice_once(f"{kind} {name!r} of {others[0].plugin.distribution!r} takes the name "
                         f"of the core's built-in example, which stays available as "
                         f"{qualified(CORE_DISTRIBUTION, name)!r}")
        else:
            table.pop(name, None)
            self._ambiguous[kind][name] = sorted(
                {*self._ambiguous[kind].get(name, []),
                 *(qualified(e.plugin.distribution, name) for e in (first, new))})

    def _fail(self, record: PluginRecord, message: str) -> None:
        full = (message if record.distribution in message else
                str(PluginError(message, distribution=record.distribution,
                                entry_point=record.entry_point)))
        record.errors.append(full)
        warnings.warn(f"rollyard plugin {record.name!r}: {full}", PluginWarning, stacklevel=3)

    def _enable_tracing(self) -> None:
        def before(hook_name: str, impls: list, kwargs: dict) -> None:
            print(f"[rollyard trace] {hook_name} -> {[i.plugin_name for i in impls]}",
                  file=sys.stderr)

        def after(outcome: Any, hook_name: str, impls: list, kwargs: dict) -> None:
            print(f"[rollyard trace] {hook_name} done", file=sys.stderr)

        self.pm.add_hookcall_monitoring(before, after)

    # ------------------------------------------------------------------ lookup

    def get(self, kind: str, name: str) -> type:
        """The class registered as ``name`` of ``kind`` (plain, or ``DIST:NAME``), or
        UnknownPluginError (PluginError for a plain name two distributions register)."""
        entry = self._lookup(kind, name)
        if entry is None and name in self._ambiguous[kind]:
            raise PluginError(f"{kind} name {name!r} is registered by several distributions; "
                              f"say which: {' or '.join(self._ambiguous[kind][name])}")
        if entry is None:
            raise UnknownPluginError(kind, name, list(self.registry[kind]))
        return entry.cls

    def owner(self, kind: str, name: str) -> PluginRecord:
        entry = self._lookup(kind, name)
        if entry is None:
            raise KeyError(f"{kind} {name!r}")
        return entry.plugin

    def _lookup(self, kind: str, name: str) -> Registered | None:
        """``name``'s registration; ``DIST:NAME`` also reaches a plain name's sole owner."""
        entry = self.registry[kind].get(name)
        if entry is None and ":" in name:
            dist, _, plain = name.rpartition(":")
            entry = self.registry[kind].get(plain)
            if entry is not None and entry.plugin.distribution != dist:
                entry = None
        return entry

    def names(self, kind: str) -> list[str]:
        return sorted(self.registry[kind])

    def observers(self) -> dict[str, Any]:
        """Loaded plugins whose observer hooks take typed options (the TensorBoard logger):
        plugin objects with a ``name`` and an ``Options`` class, by entry-point name. Their
        options are ``--<name>-*`` flags and reach them decoded in ``on_run_start``'s config,
        as ``config.plugin_options[name]`` (the plain data under ``config[name]``)."""
        observer_hooks = {"on_run_start", "on_samples", "on_step_end", "on_run_end"}
        return {name: plugin for name, plugin in self.pm.list_name_plugin()
                if name in self.records and getattr(plugin, "Options", None) is not None
                and isinstance(getattr(plugin, "name", None), str)
                and observer_hooks & set(self.records[name].hooks)}


    def observer_tables(self) -> set[str]:
        """The option tables of the loaded observer plugins."""
        return {options_prefix(observer) for observer in self.observers().values()}

    def option_tables(self, parser: argparse.ArgumentParser | None = None,
                      plugins: Iterable[str] | None = None) -> OptionTables:
        """Every option table of the loaded plugins; ``add_options`` options are added to
        ``parser`` (a throwaway one if None). ``plugins`` limits them to those plugins
        (entry-point names)."""
        tables = OptionTables()
        wanted = None if plugins is None else set(plugins)
        for kind in self.registry:
            if kind in NO_OPTIONS_KINDS:
                continue
            for name in self.names(kind):
                record = self.owner(kind, name)
                cls = self.get(kind, name)
                if getattr(cls, "Options", None) is None or (
                        wanted is not None and record.name not in wanted):
                    continue
                tables.add_typed(cls, kind, record.name)
        for plugin, observer in self.observers().items():
            if wanted is None or plugin in wanted:
                tables.add_typed(observer, OBSERVER, plugin)
        groups = self.hooks.add_options(parser or argparse.ArgumentParser(add_help=False),
                                        plugins=wanted)
        for plugin, group in groups.items():
            tables.add_legacy(plugin, group.declared)
        return tables


def _renamed(cls: type, name: str) -> type:
    """``cls`` registered as ``name`` (``DIST:NAME``): a subclass with that ``name`` whose typed
    options, if it declares any under its plain name, move to the ``DIST-NAME`` table and
    flags (the plain ones belong to the plugin that keeps the plain name)."""
    if getattr(cls, "name", None) == name:
        return cls
    attributes: dict[str, Any] = {"name": name, "__module__": cls.__module__,
                                  "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
    if getattr(cls, "Options", None) is not None and not getattr(cls, "options_prefix", ""):
        attributes["options_prefix"] = name.replace(":", "-")
    return type(cls.__name__, (cls,), attributes)


_NOTICED: set[str] = set()


def _notice_once(line: str) -> None:
    """One line on stderr, once per process (workers and the driver each load plugins)."""
    if line not in _NOTICED:
        _NOTICED.add(line)
        print(f"rollyard: {line}", file=sys.stderr)


class HookFacade:
    """The only way the core calls hooks: one typed method per hook."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self._pm = pm

    def add_options(self, parser: argparse.ArgumentParser,
                    plugins: Iterable[str] | None = None) -> dict[str, PluginOptionGroup]:
        """Call each plugin's ``add_options`` with a group of its own; returns the groups by
        plugin name (only ``plugins`` when given)."""
        hook = self._pm.hook.add_options
        groups = {}
        for name in sorted({impl.plugin_name for impl in hook.get_hookimpls()}):
            if plugins is not None and name not in plugins:
                continue
            others = [p for n, p in self._pm.list_name_plugin() if n != name]
            groups[name] = PluginOptionGroup(parser, name)
            self._pm.subset_hook_caller("add_options", remove_plugins=others)(
                group=groups[name])
        return groups

    def on_run_start(self, config: Mapping[str, Any], run_dir: str,
                     resumed_step: int = 0) -> None:
        self._pm.hook.on_run_start(config=config, run_dir=run_dir, resumed_step=resumed_step)

    def on_samples(self, step: int, samples: list[Any]) -> None:
        self._pm.hook.on_samples(step=step, samples=samples)

    def on_step_end(self, step: int, metrics: dict[str, float]) -> None:
        self._pm.hook.on_step_end(step=step, metrics=metrics)

    def on_run_end(self, run_dir: str, status: str, error: str | None) -> None:
        self._pm.hook.on_run_end(run_dir=run_dir, status=status, error=error)
