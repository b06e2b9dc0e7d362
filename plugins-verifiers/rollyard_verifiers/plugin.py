"""Entry point of rollyard-verifiers. Light: verifiers is imported inside methods."""

from __future__ import annotations

from collections.abc import Callable

from rollyard import hookimpl


@hookimpl
def register_rollouts(register: Callable[[type], None]) -> None:
    """The ``verifiers`` rollout (``--rollout-plugin verifiers``)."""
    from rollyard_verifiers.rollout import VerifiersRollout

    register(VerifiersRollout)


@hookimpl
def register_commands(register: Callable[[type], None]) -> None:
    """``rollyard verifiers install ENV``."""
    from rollyard_verifiers.install import VerifiersCommand

    register(VerifiersCommand)
