"""The ``clash`` rollout: the toy copy task, constructed only where ``openai`` is 2.6.1.

Light at module level (the core imports this module to list it); openai is imported when the
rollout is built, in its worker. ``--clash-die-once-file PATH``: the first worker to create
PATH exits on the spot inside ``run_group`` (a worker dying mid-run). ``--clash-fail-to-build
MESSAGE``: the constructor raises MESSAGE once openai is checked (a plugin failing to build
in its isolated venv).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rollyard import RolloutContext, RolloutError, Sample, Task, hookimpl
from rollyard.options import option
from rollyard_plugins.toy import StringOperationRollout, ToyOptions

WANTED_OPENAI = "2.6.1"


@dataclass(frozen=True)
class ClashOptions(ToyOptions):
    die_once_file: str = option("", help="the first worker to create this file exits")
    fail_to_build: str = option("", help="the constructor raises this message")


class ClashRollout(StringOperationRollout):
    name = "clash"
    Options = ClashOptions
    default_rewards = {"exact-match": 1.0}

    def __init__(self, context: RolloutContext) -> None:
        import openai

        if openai.__version__ != WANTED_OPENAI:
            raise RolloutError(f"built with openai {openai.__version__}, but this plugin "
                               f"requires openai=={WANTED_OPENAI}", plugin=self.name)
        if context.options.fail_to_build:
            raise RuntimeError(f"{context.options.fail_to_build} (openai {openai.__version__})")
        self.openai_version = openai.__version__
        super().__init__(context)

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        path = self.context.options.die_once_file
        if path:
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                os._exit(3)
        samples = await super().run_group(task, n)
        for sample in samples:
            sample.metadata["openai"] = self.openai_version
        return samples


@hookimpl
def register_rollouts(register):
    register(ClashRollout)
