"""Where a plugin class declares its typed options, and what it receives as options.

Every registered kind but commands derives from :class:`Configurable`. A class's options reach
it decoded once, by :func:`rollyard.options.build_options`: an instance of its ``Options``
class, or, for a class of a plugin that declares its options with the ``add_options`` hook, the
generated :class:`rollyard.options.LegacyOptions` instance of that plugin's table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from rollyard.options import LegacyOptions, build_options


class Configurable:
    """Where a plugin class declares its typed options (see :mod:`rollyard.options`)."""

    #: A frozen dataclass of this class's options, or None (then it receives its plugin's
    #: ``add_options`` options, which also read as a dict).
    Options: ClassVar[type | None] = None
    #: Flag prefix and run.toml table of ``Options``; the class's ``name`` when empty.
    #: Classes of one plugin that share options set the same prefix and ``Options`` class.
    options_prefix: ClassVar[str] = ""


def options_prefix(cls: type) -> str:
    """The table name and flag prefix of a class's typed options: ``options_prefix`` if set,
    else its registered ``name``."""
    return getattr(cls, "options_prefix", "") or cls.name


def received_options(cls: type | None, options: Any) -> Any:
    """The options a class receives from what it was given: an options instance as it is;
    a dict of raw values by name (tests and scripts pass them) or None decoded into
    ``cls.Options`` (defaults for None); for a class without ``Options`` (or ``cls`` None), a
    dict is copied and None is an empty dict."""
    options = {} if options is None else options
    if isinstance(options, LegacyOptions) or not isinstance(options, Mapping):
        return options
    declared = getattr(cls, "Options", None) if cls is not None else None
    if declared is None:
        return dict(options)
    return build_options(declared, options_prefix(cls), options)
