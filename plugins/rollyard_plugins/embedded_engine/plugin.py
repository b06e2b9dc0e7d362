"""Entry point of the embedded engine plugin: engine ``embedded`` and ``rollyard engine``.

Light on purpose: torch and transformers are imported only by the server process.
"""

from __future__ import annotations

from typing import Any

from rollyard import hookimpl

from rollyard_plugins.embedded_engine.command import EngineCommand
from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine


@hookimpl
def register_engines(register: Any) -> None:
    register(EmbeddedEngine)


@hookimpl
def register_commands(register: Any) -> None:
    register(EngineCommand)
