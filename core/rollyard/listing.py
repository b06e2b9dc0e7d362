"""What ``rollyard plugins`` prints: one table that fits an 80-column terminal.

Three columns, not six: a plugin's distribution and version sit under its name, a
registration hook is left out of "hooks" when what it registered is listed (``rollout: toy``
says ``register_rollouts``), and load errors, which are long, follow the table as wrapped
lines instead of squeezing every row into a narrow column. ``--json`` keeps every field.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from rollyard.plugins import KINDS, PluginRecord


def plugins_table(records: Iterable[PluginRecord]) -> RenderableType:
    """The installed plugins as a table, followed by their load errors (if any)."""
    records = list(records)
    table = Table(title="rollyard plugins", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("plugin", overflow="fold")
    table.add_column("registers", overflow="fold")
    table.add_column("hooks", overflow="fold")
    for record in records:
        name = Text(record.name, style="bold red" if record.errors else "bold")
        name.append(f"\n{record.distribution} {record.version}".rstrip(), style="dim")
        table.add_row(name, _registers(record), ", ".join(_hooks(record)) or "-")
    errors = [_error_line(record.name, error) for record in records for error in record.errors]
    return Group(table, *errors) if errors else table


def _registers(record: PluginRecord) -> str:
    return "\n".join(f"{kind}: {', '.join(names)}" for kind, names in record.registers.items()
                     if names) or "-"


def _hooks(record: PluginRecord) -> list[str]:
    """The hooks worth showing: all but the registration hooks whose classes are listed."""
    listed = {kind for kind, names in record.registers.items() if names}
    return [hook for hook in record.hooks if KINDS.get(hook, ("",))[0] not in listed]


def _error_line(plugin: str, error: str) -> Text:
    line = Text("error ", style="bold red")
    line.append(f"{plugin}: ", style="bold")
    line.append(error)
    return line
