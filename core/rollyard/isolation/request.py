"""A rollout's own request for a venv, when the options of a run decide what it needs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IsolatedEnvironment:
    """The venv a rollout's workers need for the options of this run, when it is not the one
    the plugin distribution declares (Rollout.isolated_environment)."""

    #: names the cached venv and the messages, e.g. "verifiers-0.3.1-legacy_arith"
    label: str
    #: uv install arguments (PEP 508 lines, local paths, URLs) added to the venv; the plugin
    #: distribution itself is then installed with --no-deps
    requirements: tuple[str, ...]
    #: one line: why it cannot run in the core's environment and the command that runs it
    reason: str
    #: uv install arguments installed --no-deps with the plugin distribution (e.g. a package
    #: whose own pins ``requirements`` override; list its other requirements there)
    no_deps: tuple[str, ...] = ()
