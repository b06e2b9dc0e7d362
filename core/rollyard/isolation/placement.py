"""Where a run's rollout workers run: the core's environment or the rollout plugin's own venv.

Decided before any Ray actor starts: a plugin whose declared requirements this environment
does not meet is refused in the shared environment (naming the requirement), so is a rollout
whose options ask for a venv of their own (with its reason), and an isolated plugin's venv is
built (or found in the cache) first.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Callable, Iterable
from typing import Any

from rollyard.errors import ConfigError
from rollyard.isolation.envs import ensure_env, env_spec
from rollyard.isolation.request import IsolatedEnvironment
from rollyard.isolation.requirements import (
    CORE_DISTRIBUTION,
    declared_requirements,
    unmet_requirements,
)
from rollyard.plugins import PluginManager


def wants_isolation(mode: str, rollout: type,
                    request: IsolatedEnvironment | None = None) -> bool:
    """``--rollout-env``: ``isolated``, ``shared``, or ``auto`` (the rollout's declaration, or
    its request for these options)."""
    return mode == "isolated" or (mode == "auto" and (
        request is not None or bool(getattr(rollout, "isolated", False))))


def rollout_python(manager: PluginManager, rollout_name: str, mode: str,
                   worker_plugins: Iterable[tuple[str, str]],
                   notice: Callable[[str], None], options: Any = None) -> str | None:
    """The Python the rollout workers run on: the isolated venv's, or None for the core's.

    ``worker_plugins``: the (kind, name) of the other plugins a worker loads (transport,
    rewards); in isolation each must come from the core or the rollout's distribution.
    ``options``: the rollout's options, which its ``isolated_environment`` answers for."""
    rollout = manager.get("rollout", rollout_name)
    distribution = manager.owner("rollout", rollout_name).distribution
    request = rollout.isolated_environment(options)
    if not wants_isolation(mode, rollout, request):
        if request is not None:
            raise ConfigError(request.reason)
        if distribution != CORE_DISTRIBUTION:
            _check_shared(rollout_name, distribution)
        return None
    for kind, name in worker_plugins:
        owner = manager.owner(kind, name).distribution
        if owner not in (CORE_DISTRIBUTION, distribution):
            raise ConfigError(
                f"{kind} {name!r} comes from {owner!r}, which the isolated environment of "
                f"rollout {rollout_name!r} (distribution {distribution!r}) does not hold: "
                "choose one from the core or that distribution, or --rollout-env shared")
    python = str(ensure_env(env_spec(distribution, request), notice) / "bin" / "python")
    notice(f"rollout workers of {rollout_name!r} run on {python} (--rollout-env {mode})")
    return python


def check_in_process(manager: PluginManager, rollout_name: str, mode: str,
                     command: str, options: Any = None) -> None:
    """For a command that runs the rollout in this process (``rollyard eval``): refuse
    isolation, and check the plugin's requirements as the shared environment does."""
    rollout = manager.get("rollout", rollout_name)
    request = rollout.isolated_environment(options)
    if request is not None and mode != "isolated":
        raise ConfigError(f"{command} runs rollout {rollout_name!r} in this process, where it "
                          f"cannot run: {request.reason}")
    if wants_isolation(mode, rollout, request):
        raise ConfigError(
            f"{command} runs rollout {rollout_name!r} in this process, so it cannot isolate it "
            f"(--rollout-env {mode}): evaluate it during training (--eval-interval N), or "
            "pass --rollout-env shared")
    distribution = manager.owner("rollout", rollout_name).distribution
    if distribution != CORE_DISTRIBUTION:
        _check_shared(rollout_name, distribution)


def _check_shared(rollout_name: str, distribution: str) -> None:
    try:
        unmet = unmet_requirements(declared_requirements(distribution))
    except md.PackageNotFoundError:  # an in-process plugin declares nothing
        return
    if unmet:
        raise ConfigError(
            f"rollout {rollout_name!r} (distribution {distribution!r}) requires "
            f"{'; '.join(unmet)}: run it in its own environment with --rollout-env isolated "
            "(docs/isolation.md)")
