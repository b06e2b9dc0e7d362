"""Entry point of rollyard-codegolf: the ``codegolf`` rollout, its three rewards and the
``rollyard codegolf`` command. The ``--codegolf-*`` options are declared once, as
:class:`rollyard_codegolf.options.CodegolfOptions` on those classes.

Everything here and in the modules it imports is standard library plus ``rollyard``, so
loading the plugin stays cheap.
"""

from __future__ import annotations

from typing import Any

from rollyard import hookimpl


@hookimpl
def register_rollouts(register: Any) -> None:
    from rollyard_codegolf.rollout import CodegolfRollout

    register(CodegolfRollout)


@hookimpl
def register_rewards(register: Any) -> None:
    from rollyard_codegolf.rewards import REWARDS

    for reward in REWARDS:
        register(reward)


@hookimpl
def register_commands(register: Any) -> None:
    from rollyard_codegolf.commands import CodegolfCommand

    register(CodegolfCommand)
