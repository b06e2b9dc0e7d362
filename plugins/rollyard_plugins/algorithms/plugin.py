"""Registers the shipped algorithms (entry point ``algorithms``)."""

from __future__ import annotations

from collections.abc import Callable

from rollyard import hookimpl

from rollyard_plugins.algorithms.dapo import DAPO
from rollyard_plugins.algorithms.dr_grpo import DrGRPO
from rollyard_plugins.algorithms.grpo import GRPO
from rollyard_plugins.algorithms.gspo import GSPO
from rollyard_plugins.algorithms.rloo import RLOO


@hookimpl
def register_algorithms(register: Callable[[type], None]) -> None:
    for cls in (GRPO, DrGRPO, DAPO, GSPO, RLOO):
        register(cls)
