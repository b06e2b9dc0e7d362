"""Plugin-owned CLI options: each plugin gets an argparse group titled with its name."""

from __future__ import annotations

import argparse
from typing import Any

from rollyard.errors import PluginError

DEST_SEPARATOR = ":"


class PluginOptionGroup:
    """An argparse argument group that only accepts ``--<plugin>-*`` options.

    Values are stored under ``<plugin>:<name>`` so that :func:`plugin_options` can hand each
    plugin its own options without the prefix.
    """

    def __init__(self, parser: argparse.ArgumentParser, plugin: str) -> None:
        self.plugin = plugin
        self.prefix = f"--{plugin}-"
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
        return self._group.add_argument(*flags, **kwargs)


def plugin_options(namespace: argparse.Namespace | dict[str, Any], plugin: str) -> dict[str, Any]:
    """The options a plugin declared, without their prefix."""
    values = vars(namespace) if isinstance(namespace, argparse.Namespace) else namespace
    head = f"{plugin}{DEST_SEPARATOR}"
    return {k[len(head):]: v for k, v in values.items() if k.startswith(head)}
