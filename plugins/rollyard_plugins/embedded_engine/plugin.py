"""Entry point of the embedded engine plugin: engine ``embedded`` and ``rollyard engine``.

Light on purpose: torch and transformers are imported only by the server process.
"""

from __future__ import annotations

from typing import Any

from rollyard import hookimpl

from rollyard_plugins.embedded_engine.command import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_THREADS,
    EngineCommand,
)
from rollyard_plugins.embedded_engine.launcher import DEFAULT_STARTUP_TIMEOUT, EmbeddedEngine


@hookimpl
def register_engines(register: Any) -> None:
    register(EmbeddedEngine)


@hookimpl
def register_commands(register: Any) -> None:
    register(EngineCommand)


@hookimpl
def add_options(group: Any) -> None:
    group.add_argument("--embedded-max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE,
                       help="most sequences one engine decodes together")
    group.add_argument("--embedded-weight-update-policy", choices=("wait", "abort"),
                       default="wait",
                       help="on a weight update, finish running requests on the old weights "
                            "(wait) or abort them")
    group.add_argument("--embedded-threads", type=int, default=DEFAULT_THREADS,
                       help="torch threads per engine; 0 = torch's choice (default: "
                            "%(default)s)")
    group.add_argument("--embedded-startup-timeout", type=float,
                       default=DEFAULT_STARTUP_TIMEOUT, help="seconds to wait for /health")
