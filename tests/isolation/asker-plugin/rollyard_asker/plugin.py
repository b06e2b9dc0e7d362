"""The ``asker`` rollout: the toy copy task, asking for a venv of its own when ``--asker-need``
names a requirement (a local path or a PEP 508 line)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollyard import IsolatedEnvironment, hookimpl
from rollyard.options import option
from rollyard_plugins.toy import StringOperationRollout, ToyOptions


@dataclass(frozen=True)
class AskerOptions(ToyOptions):
    need: str = option("", help="a requirement the rollout's venv must hold")


class AskerRollout(StringOperationRollout):
    name = "asker"
    Options = AskerOptions
    default_rewards = {"exact-match": 1.0}

    @classmethod
    def isolated_environment(cls, options: Any) -> IsolatedEnvironment | None:
        if not options.need:
            return None
        return IsolatedEnvironment(
            label=f"asker-{Path(options.need).name}", requirements=(options.need,),
            reason=f"rollout 'asker' needs {options.need}, which this environment lacks: "
                   f"rollyard train --rollout-plugin asker --asker-need {options.need} "
                   "--rollout-env isolated")


@hookimpl
def register_rollouts(register):
    register(AskerRollout)
