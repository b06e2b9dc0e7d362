"""Options declared once, as a typed class, from which flags, run.toml tables, config.json
sections and docs are derived.

A plugin class declares its options as a frozen dataclass named ``Options``::

    @dataclass(frozen=True)
    class Options:
        operation: Literal["copy", "reverse"] = option("copy", help="what to do to the word")
        num_tasks: int = option(200, help="distinct words", check=at_least(2))

The core turns each field into ``--<prefix>-<field>`` (dashes for underscores), a key of the
``[<prefix>]`` table of run.toml and of config.json, and a row of the docs table. The prefix is
the class's ``options_prefix`` (its ``name`` unless set). Validation that spans fields goes in
``__post_init__`` and raises ``ValueError``; the core reports it as a ConfigError naming the
option.

Plugins written before typed options declare them with the ``add_options`` hook on a
:class:`PluginOptionGroup`; they keep working: the core generates a frozen dataclass of
those options (:func:`legacy_options_class`) that also reads as the ``dict`` they received
before, so every plugin's options are decoded by one function, :func:`build_options`.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import keyword
import math
import re
import types
import typing
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union

from rollyard.errors import ConfigError, PluginError

Check = Callable[[Any], None]
MISSING = dataclasses.MISSING


def option(default: Any = MISSING, *, help: str = "", check: Check | None = None,
           metavar: str | None = None, aliases: tuple[str, ...] = (),
           group: str | None = None) -> Any:
    """A dataclass field that is also a command-line option.

    ``check`` raises ``ValueError`` for a value that cannot work; ``aliases`` are extra flags
    (``--vf-env``); ``group`` titles the option's section in ``--help`` (core options only).
    Mutable defaults (lists, dicts) are not allowed: use tuples.
    """
    if isinstance(default, (list, dict, set)):
        raise TypeError("option defaults must be immutable: use a tuple")
    metadata = {"help": help, "check": check, "metavar": metavar, "aliases": tuple(aliases),
                "group": group}
    return dataclasses.field(default=default, metadata=metadata)


# --------------------------------------------------------------------------- checks


def positive(value: float) -> None:
    """Check: greater than 0."""
    if value <= 0:
        raise ValueError("must be greater than 0")


def non_negative(value: float) -> None:
    """Check: 0 or more."""
    if value < 0:
        raise ValueError("must be 0 or more")


def at_least(low: float) -> Check:
    """Check: ``low`` or more."""
    def check(value: float) -> None:
        if value < low:
            raise ValueError(f"must be at least {low}")
    return check


def between(low: float, high: float) -> Check:
    """Check: within ``low..high`` inclusive."""
    def check(value: float) -> None:
        if not low <= value <= high:
            raise ValueError(f"must be within {low}..{high}")
    return check


# --------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class OptionSpec:
    """One typed option: where its value comes from and how a raw value is checked."""

    name: str
    prefix: str
    kind: type
    default: Any
    help: str
    optional: bool = False
    choices: tuple[Any, ...] | None = None
    repeated: bool = False
    check: Check | None = None
    metavar: str | None = None
    aliases: tuple[str, ...] = ()
    group: str | None = None

    @property
    def flag(self) -> str:
        dashed = self.name.replace("_", "-")
        return f"--{self.prefix}-{dashed}" if self.prefix else f"--{dashed}"

    @property
    def type_name(self) -> str:
        """The type as the docs table shows it."""
        if self.choices is not None:
            base = " | ".join(repr(c) for c in self.choices)
        else:
            base = self.kind.__name__
        if self.repeated:
            base = f"list[{base}]"
        return f"{base} | None" if self.optional else base

    def coerce(self, value: Any, where: str) -> Any:
        """A value from run.toml, config.json or a constructor, checked and converted; a
        ConfigError names ``where`` (the flag or the toml key)."""
        if value is None:
            if self.optional:
                return None
            raise ConfigError(f"{where}: a value is required (null is not allowed)")
        if self.repeated:
            if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
                raise ConfigError(f"{where}: expected a list, got {value!r}")
            return tuple(self._one(item, where) for item in value)
        return self._one(value, where)

    def parse_text(self, text: str) -> Any:
        """A command-line value, for argparse's ``type=`` (errors become usage errors)."""
        try:
            value = _from_text(self.kind, text)
            return self._one(value, self.flag)
        except ConfigError as exc:
            message = str(exc).removeprefix(self.flag).lstrip(": ")
            raise argparse.ArgumentTypeError(message) from None

    def _one(self, value: Any, where: str) -> Any:
        value = _typed(self.kind, value, where)
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{where} {value!r}: choose one of {list(self.choices)}")
        if self.check is not None:
            try:
                self.check(value)
            except ValueError as exc:
                raise ConfigError(f"{where} {value!r}: {exc}") from None
        return value

    def to_data(self, value: Any) -> Any:
        """The value as JSON/TOML data."""
        return list(value) if isinstance(value, tuple) else value


def _from_text(kind: type, text: str) -> Any:
    if kind is bool:
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{text!r} is not a boolean")
    if kind is str:
        return text
    try:
        return kind(text)
    except ValueError:
        raise ConfigError(f"{text!r} is not a {kind.__name__}") from None


def _typed(kind: type, value: Any, where: str) -> Any:
    """``value`` as ``kind``; ints are accepted for floats, nothing else is converted."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError(f"{where}: expected {kind.__name__}, got {value!r}")
    if kind is float and not math.isfinite(value):
        raise ConfigError(f"{where}: {value!r} is not a finite number")
    return value


def _unpack(annotation: Any, where: str) -> tuple[type, bool, tuple[Any, ...] | None, bool]:
    """(base type, optional, choices, repeated) of a field annotation."""
    optional = False
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        if len(args) != 1:
            raise PluginError(f"{where}: unions other than `X | None` are not supported")
        annotation = args[0]
        origin = typing.get_origin(annotation)
    repeated = False
    if origin is tuple:
        args = typing.get_args(annotation)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise PluginError(f"{where}: a repeatable option is annotated tuple[X, ...]")
        repeated, annotation = True, args[0]
        origin = typing.get_origin(annotation)
    choices = None
    if origin is Literal:
        choices = typing.get_args(annotation)
        annotation = type(choices[0])
    if annotation not in (str, int, float, bool):
        raise PluginError(f"{where}: option type {annotation!r} is not supported (str, int, "
                          "float, bool, Literal[...], X | None and tuple[X, ...] are)")
    return annotation, optional, choices, repeated


def option_specs(options_cls: type, prefix: str) -> list[OptionSpec]:
    """The options a typed ``Options`` class declares, in declaration order."""
    if not (isinstance(options_cls, type) and dataclasses.is_dataclass(options_cls)):
        raise PluginError(f"options of {prefix!r}: {options_cls!r} is not a dataclass")
    hints = typing.get_type_hints(options_cls)
    specs = []
    for f in dataclasses.fields(options_cls):
        if not f.init or f.metadata.get("option") is False:
            continue
        where = f"option {f.name!r} of {options_cls.__qualname__}"
        if f.default is MISSING:
            raise PluginError(f"{where} has no default (every option needs one)")
        kind, optional, choices, repeated = _unpack(hints[f.name], where)
        meta = f.metadata
        specs.append(OptionSpec(
            name=f.name, prefix=prefix, kind=kind, default=f.default, help=meta.get("help", ""),
            optional=optional, choices=choices, repeated=repeated, check=meta.get("check"),
            metavar=meta.get("metavar"), aliases=tuple(meta.get("aliases", ())),
            group=meta.get("group")))
    return specs


def field_specs(options_cls: type, prefix: str) -> dict[str, OptionSpec | LegacyOption]:
    """The options of an ``Options`` class by name: its typed specs, or the ``add_options``
    options a generated :class:`LegacyOptions` class stands for."""
    if isinstance(options_cls, type) and issubclass(options_cls, LegacyOptions):
        return dict(options_cls.legacy_options)
    return {spec.name: spec for spec in option_specs(options_cls, prefix)}


def coerce_values(options_cls: type, prefix: str, values: Mapping[str, Any],
                  source: str = "") -> dict[str, Any]:
    """Raw values (run.toml, config.json, a test's dict) checked and converted by their
    options, by option name; an unknown key or a bad value is a ConfigError naming ``source``,
    the ``[prefix]`` table and the key (the flag when ``source`` is empty)."""
    specs = field_specs(options_cls, prefix)
    here = f"{source}: " if source else ""
    checked = {}
    for key, value in values.items():
        spec = specs.get(key.replace("-", "_"))
        if spec is None:
            raise ConfigError(f"{here}unknown option [{prefix}] {key!r} (no plugin option "
                              f"--{prefix}-{key.replace('_', '-')}); known: "
                              f"{', '.join(specs) or 'none'}")
        where = f"{here}[{prefix}] {key!r}" if source else spec.flag
        checked[spec.name] = spec.coerce(value, where)
    return checked


def build_options(options_cls: type, prefix: str, values: Mapping[str, Any],
                  source: str = "", base: Any = None) -> Any:
    """The decoder of plugin options: an ``Options`` instance (or a generated
    :class:`LegacyOptions` one) from raw values over the defaults (over the values of
    ``base``, an instance, when given); every raw value is checked (:func:`coerce_values`)
    and ``__post_init__`` failures are ConfigErrors naming ``source`` or the plugin's flags."""
    kept = {} if base is None else options_values(base)
    return construct_options(options_cls, prefix,
                             {**kept, **coerce_values(options_cls, prefix, values, source)},
                             source)


def construct_options(options_cls: type, prefix: str, values: Mapping[str, Any],
                      source: str = "") -> Any:
    """``options_cls(**values)`` with checked values (by option name); a ``ValueError`` from
    its ``__post_init__`` becomes a ConfigError naming ``source``, else the plugin's flags."""
    if isinstance(options_cls, type) and issubclass(options_cls, LegacyOptions):
        values = {options_cls.field_names[key]: value for key, value in values.items()}
    try:
        return options_cls(**values)
    except ValueError as exc:
        label = source or (f"--{prefix}-* options" if prefix else "options")
        raise ConfigError(f"{label}: {exc}") from None


def options_from_args(options_cls: type, args: Any,
                      names: Collection[str] | None = None) -> Any:
    """A command's ``Options`` from its parsed arguments (flags added without a prefix by
    :func:`add_spec_arguments` with ``dest_is_name``; only ``names`` when given), decoded and
    checked by :func:`build_options`."""
    values = {spec.name: getattr(args, spec.name) for spec in option_specs(options_cls, "")
              if (names is None or spec.name in names) and hasattr(args, spec.name)}
    return build_options(options_cls, "", values)


def options_values(instance: Any) -> dict[str, Any]:
    """The values of an options instance by option name, as they are (a plain mapping, what
    a pickled :class:`LegacyOptions` becomes, as a dict)."""
    if isinstance(instance, LegacyOptions):
        return instance.values_by_name()
    if isinstance(instance, Mapping):
        return dict(instance)
    return {f.name: getattr(instance, f.name) for f in dataclasses.fields(instance)
            if f.init and f.metadata.get("option") is not False}


def options_data(instance: Any) -> dict[str, Any]:
    """An options instance as plain data (the config.json / run.toml table)."""
    return {name: list(value) if isinstance(value, tuple) else value
            for name, value in options_values(instance).items()}


# --------------------------------------------------------------------------- argparse


def add_spec_arguments(group: Any, specs: list[OptionSpec],
                       dest_is_name: bool = False) -> list[argparse.Action]:
    """Add one flag per spec to an argparse parser or group. ``dest`` is the flag (so that
    plugins' options never collide), or the option's name for a command's own parser."""
    actions = []
    for spec in specs:
        dest = spec.name if dest_is_name else spec.flag
        flags = (spec.flag, *spec.aliases)
        help_text = with_default(spec.help or spec.name.replace("_", " "),
                                 ", ".join(map(str, spec.default)) or "none"
                                 if spec.repeated else spec.default)
        if spec.kind is bool and not spec.repeated:
            actions.append(group.add_argument(
                *flags, dest=dest, action=argparse.BooleanOptionalAction,
                default=spec.default, help=help_text))
            continue
        actions.append(group.add_argument(
            *flags, dest=dest, type=spec.parse_text,
            # argparse would append to a default list: repeated options start absent
            default=argparse.SUPPRESS if spec.repeated else spec.default,
            action="append" if spec.repeated else "store", help=help_text,
            metavar=spec.metavar or ("{" + ",".join(map(str, spec.choices)) + "}"
                                     if spec.choices else spec.name.upper())))
    return actions


def with_default(help_text: str, default: Any) -> str:
    """Help text that ends with the default, unless it already names one."""
    if "default" in help_text or help_text == argparse.SUPPRESS:
        return help_text
    return f"{help_text} (default: {default})"


# --------------------------------------------------------------------------- legacy hook

DEST_SEPARATOR = ":"


@dataclass(frozen=True)
class LegacyOption:
    """One option declared through the ``add_options`` hook, as the core needs it."""

    name: str
    action: argparse.Action
    repeated: bool

    @property
    def flag(self) -> str:
        return self.action.option_strings[0]

    def coerce(self, value: Any, where: str) -> Any:
        """A run.toml value as its flag would have parsed it (type and choices)."""
        if self.repeated and isinstance(value, list):
            return [self._one(item, where) for item in value]
        return self._one(value, where)

    def _one(self, value: Any, where: str) -> Any:
        convert = self.action.type
        if callable(convert) and not isinstance(value, (bool, dict, list)):
            try:
                value = convert(str(value))
            except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
                raise ConfigError(f"{where} {value!r}: {exc}") from None
        if self.action.choices is not None and value not in self.action.choices:
            raise ConfigError(f"{where}: {value!r} is not one of {sorted(self.action.choices)}")
        return value


class PluginOptionGroup:
    """An argparse argument group that only accepts ``--<plugin>-*`` options (the
    ``add_options`` hook of plugins written before typed options).

    Values are stored under ``<plugin>:<name>``; the options declared are kept in
    :attr:`declared` so the core can read run.toml values and defaults for them.
    """

    def __init__(self, parser: argparse.ArgumentParser, plugin: str) -> None:
        self.plugin = plugin
        self.prefix = f"--{plugin}-"
        self.declared: list[LegacyOption] = []
        self._group = parser.add_argument_group(f"{plugin} (plugin options)")

    def add_argument(self, *flags: str, **kwargs: Any) -> argparse.Action:
        """Add an option. The first flag must be ``--<plugin>-<name>``; further flags are
        aliases (``--vf-env``) that argparse rejects if another owner already took them."""
        first = flags[0] if flags else ""
        if not first.startswith(self.prefix) or len(first) == len(self.prefix):
            raise PluginError(
                f"option {first!r} of plugin {self.plugin!r} must start with {self.prefix!r}",
                entry_point=self.plugin)
        name = first[len(self.prefix):].replace("-", "_")
        kwargs.setdefault("dest", f"{self.plugin}{DEST_SEPARATOR}{name}")
        if kwargs.get("action") in (None, "store", "append") and "choices" not in kwargs:
            kwargs.setdefault("metavar", name.upper())
        if kwargs.get("help") is not None:
            kwargs["help"] = with_default(kwargs["help"], "%(default)s")
        action = self._group.add_argument(*flags, **kwargs)
        self.declared.append(LegacyOption(name, action, kwargs.get("action") == "append"))
        return action


class ReadOnlyDict(dict):
    """A ``dict`` whose items cannot change once it is built (subclasses fill it with
    ``dict.update(self, ...)``); a change raises TypeError saying :attr:`read_only`."""

    read_only: ClassVar[str] = "read-only"

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(self.read_only)

    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]


class LegacyOptions(dict):
    """The base of the frozen dataclass generated for a plugin's ``add_options`` options
    (:func:`legacy_options_class`): one field per option, read as attributes
    (``options.count``), and still the ``dict`` such plugins received before
    (``options["count"]``, ``options.get("count")``, ``dict(options)``, ``json.dumps``).
    The fields cannot change; each class receives its own instance, and a change to its dict
    (which old plugins could make to the copy they received) is applied to that dict alone,
    with a DeprecationWarning.
    """

    #: The options of the table by name (the flag without ``--<plugin>-``, dashes as ``_``).
    legacy_options: ClassVar[Mapping[str, LegacyOption]] = {}
    #: Option name -> field name (they differ only for a name that cannot be a field).
    field_names: ClassVar[Mapping[str, str]] = {}
    #: The plugin (entry-point name) whose ``add_options`` hook declared the options.
    plugin: ClassVar[str] = ""

    def __post_init__(self) -> None:
        dict.update(self, self.values_by_name())

    def __copy__(self) -> LegacyOptions:
        return dataclasses.replace(self)  # type: ignore[type-var]

    def values_by_name(self) -> dict[str, Any]:
        """The values as a new dict by option name (the run.toml table)."""
        return {key: getattr(self, name) for key, name in self.field_names.items()}

    def copy(self) -> dict[str, Any]:  # type: ignore[override]
        """The dict as a new, plain dict."""
        return dict(self)

    def __repr__(self) -> str:  # as the dict was shown, in messages that quote options
        return repr(dict(self))

    def __reduce__(self) -> tuple[Any, ...]:
        # the class is made at run time and cannot be imported: pickles as its dict
        return (dict, (dict(self),))


def _changing_the_dict(method: Callable[..., Any]) -> Callable[..., Any]:
    """A dict method of :class:`LegacyOptions` that warns before it changes the dict."""

    @functools.wraps(method)
    def warned(self: LegacyOptions, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"changing the options of plugin {self.plugin!r} through their dict "
                      "changes that dict only, not the decoded options; copy them with "
                      "dict(options) instead", DeprecationWarning, stacklevel=2)
        return method(self, *args, **kwargs)

    return warned


for _name in ("__setitem__", "__delitem__", "__ior__", "clear", "pop", "popitem",
              "setdefault", "update"):
    setattr(LegacyOptions, _name, _changing_the_dict(getattr(dict, _name)))


def legacy_options_class(plugin: str, declared: Sequence[LegacyOption]) -> type[LegacyOptions]:
    """The frozen dataclass of the options ``plugin`` declared with ``add_options``: the one
    typed form in which they are decoded (:func:`build_options`) and handed to its classes.
    Field defaults are the options' argparse defaults."""
    reserved = set(dir(LegacyOptions))
    fields: list[tuple[str, Any, Any]] = []
    names: dict[str, str] = {}
    for index, legacy in enumerate(declared):
        name = legacy.name
        if (not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_")
                or name in reserved):
            name = f"option_{index}"
        default = legacy.action.default
        if isinstance(default, (list, dict, set)):
            spec = dataclasses.field(default_factory=functools.partial(copy.deepcopy, default))
        else:
            spec = dataclasses.field(default=default)
        fields.append((name, Any, spec))
        names[legacy.name] = name
    title = "".join(part.capitalize() for part in re.split(r"[^0-9A-Za-z]+", plugin))
    namespace = {"legacy_options": {o.name: o for o in declared}, "field_names": names,
                 "plugin": plugin, "__module__": __name__}
    return dataclasses.make_dataclass(f"{title or 'Plugin'}LegacyOptions", fields,
                                      bases=(LegacyOptions,), namespace=namespace,
                                      frozen=True, eq=False, repr=False)
