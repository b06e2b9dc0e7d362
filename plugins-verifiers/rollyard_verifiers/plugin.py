"""Entry point of rollyard-verifiers. Light: verifiers is imported inside methods."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rollyard import hookimpl


@hookimpl
def register_rollouts(register: Callable[[type], None]) -> None:
    """The ``verifiers`` rollout (``--rollout-plugin verifiers``)."""
    from rollyard_verifiers.rollout import VerifiersRollout

    register(VerifiersRollout)


@hookimpl
def add_options(group: Any) -> None:
    """``--verifiers-*`` options; values reach the rollout without the prefix."""
    group.add_argument("--verifiers-env", "--vf-env", metavar="ID",
                       help="verifiers environment: an importable taskset package "
                            "(e.g. rollyard_codegolf.verifiers_env)")
    group.add_argument("--verifiers-env-config", metavar="JSON",
                       help="JSON merged into the verifiers env config (taskset arguments, "
                            "harness, runtime, max_turns …)")
    group.add_argument("--verifiers-eval-config", metavar="JSON",
                       help="JSON merged into the env config for the eval split")
    group.add_argument("--verifiers-max-turns", type=int, metavar="N",
                       help="turn limit per episode (default: the environment's)")
    group.add_argument("--verifiers-max-tasks", type=int, metavar="N",
                       help="use only the first N tasks (required for infinite tasksets)")
    group.add_argument("--verifiers-concurrency", type=int, default=32, metavar="N",
                       help="episodes in flight at once, over all groups (default 32)")
