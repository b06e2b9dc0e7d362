"""The hook surface of rollyard (pluggy project ``rollyard``).

A plugin is a module named by an entry point in the ``rollyard`` group, for example::

    [project.entry-points.rollyard]
    mything = "mything.plugin"

and implements any of the hooks below with ``@rollyard.hookimpl``. Registration hooks receive
a ``register`` callback and may call it zero, one or many times with a class that carries a
unique ``name``; pluggy passes an implementation only the arguments it names, so new keyword
arguments can be added later without breaking old plugins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from rollyard.config import ConfigView
    from rollyard.options import PluginOptionGroup
    from rollyard.types import Sample

hookspec = pluggy.HookspecMarker("rollyard")
hookimpl = pluggy.HookimplMarker("rollyard")

Register = Callable[[type], None]

# --------------------------------------------------------------------------- registration


@hookspec
def register_rollouts(register: Register) -> None:
    """Register environments: classes derived from :class:`rollyard.Rollout`.

    Called once, when the plugin is loaded. ``register(cls)`` takes a class with a unique
    ``name``; ``--rollout-plugin NAME`` selects it. Returns nothing.
    """


@hookspec
def register_transports(register: Register) -> None:
    """Register token-in/token-out clients: classes derived from :class:`rollyard.Transport`.

    Called once, when the plugin is loaded. ``--transport NAME`` selects one. Returns nothing.
    """


@hookspec
def register_rewards(register: Register) -> None:
    """Register reward functions: classes derived from :class:`rollyard.Reward`.

    Called once, when the plugin is loaded. Rewards are selected with ``--reward NAME[=W]``
    or by a rollout's ``default_rewards``. Returns nothing.
    """


@hookspec
def register_engines(register: Register) -> None:
    """Register inference-engine launchers: classes derived from :class:`rollyard.Engine`.

    Called once, when the plugin is loaded. ``--engine NAME`` selects the one a run starts;
    every engine serves the SGLang HTTP protocol. Returns nothing.
    """


@hookspec
def register_commands(register: Register) -> None:
    """Register CLI subcommands: classes derived from :class:`rollyard.Command`.

    Called when the CLI is built. Each command becomes ``rollyard NAME …``. Returns nothing.
    """


@hookspec
def register_algorithms(register: Register) -> None:
    """Register RL algorithms: classes derived from :class:`rollyard.Algorithm`.

    Called once, when the plugin is loaded, in the driver and in every training rank.
    ``--algorithm NAME`` selects one; it owns the advantage estimate and the policy loss.
    Returns nothing.
    """


@hookspec
def add_options(group: PluginOptionGroup) -> None:
    """Add this plugin's own options to ``group``, an argparse group titled with its name.

    Called once per plugin while the ``train`` parser is built. Every option must start with
    ``--<plugin-name>-``; values reach the plugin's classes as ``context.options`` with the
    prefix removed. Returns nothing.
    """


# --------------------------------------------------------------------------- observers
# Observers are broadcast to every plugin; their return values are ignored and they must
# not change what they receive.


@hookspec
def on_run_start(config: ConfigView, run_dir: str, resumed_step: int) -> None:
    """Called once before the first step with the resolved config and the run folder.

    ``config`` is a read-only :class:`rollyard.config.ConfigView`: typed attributes
    (``config.seed``; ``config.plugin_options[name]``, a plugin's decoded options) and, as
    before, the config.json data by key (``config["seed"]``, ``config[name]`` a table); it is
    a ``dict`` that cannot change.

    ``resumed_step`` is the step of the checkpoint a resumed run (``--resume``) continues
    from, 0 for a new run; a logger keeps what it recorded up to that step and drops the rest.
    """


@hookspec
def on_samples(step: int, samples: list[Sample]) -> None:
    """Called after each step's samples are validated and scored, before training on them."""


@hookspec
def on_step_end(step: int, metrics: dict[str, float]) -> None:
    """Called after each training step with that step's metrics (reward, loss, timings …)."""


@hookspec
def on_run_end(run_dir: str, status: str, error: str | None) -> None:
    """Called once when the run ends; ``status`` is ``completed``, ``failed`` (``error`` says
    why) or ``interrupted`` (SIGINT or SIGTERM stopped it after saving a checkpoint)."""
