"""Typed errors. Each names what was wrong and where (plugin, entry point, option, task)."""

from __future__ import annotations

import re
import sys
from typing import Any


class RollyardError(Exception):
    """Base class of every error rollyard raises on purpose."""


class ConfigError(RollyardError):
    """A run's configuration (CLI flags or run.toml) is invalid."""


class PluginError(RollyardError):
    """A plugin failed to load, register or behave; names its distribution and entry point."""

    def __init__(self, message: str, *, distribution: str | None = None,
                 entry_point: str | None = None) -> None:
        where = ", ".join(x for x in (
            f"distribution {distribution!r}" if distribution else "",
            f"entry point {entry_point!r}" if entry_point else "") if x)
        super().__init__(f"{message} ({where})" if where else message)
        self.distribution = distribution
        self.entry_point = entry_point


class UnknownPluginError(PluginError):
    """A name selects nothing installed; lists what is available and the nearest match."""

    def __init__(self, kind: str, name: str, available: list[str]) -> None:
        import difflib

        close = difflib.get_close_matches(name, available, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        listed = ", ".join(sorted(available)) or "none"
        super().__init__(f"no {kind} named {name!r} is installed; available: {listed}.{hint}")
        self.name = name
        self.available = sorted(available)


class SampleError(RollyardError):
    """A sample broke an invariant; names the task id and the field."""

    def __init__(self, task_id: str, field: str, problem: str) -> None:
        super().__init__(f"invalid sample for task {task_id!r}: field {field!r}: {problem}")
        self.task_id = task_id
        self.field = field


class TransportError(RollyardError):
    """Talking to an inference engine failed; names the engine URL."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(f"{message} [engine {url}]" if url else message)
        self.url = url


class EngineAborted(TransportError):
    """The engine aborted the request (finish_reason 'abort'); never a result.

    ``partial``: what the engine had generated until then, when it said (a
    :class:`rollyard.GenerateResult` whose ``finish_reason`` is ``"abort"``), else None;
    with ``--partial-rollouts`` the run resumes the generation from there.
    """

    def __init__(self, message: str, *, url: str | None = None, partial: Any = None) -> None:
        super().__init__(message, url=url)
        self.partial = partial


class EngineStartError(RollyardError):
    """An engine process did not become healthy; quotes its last log lines."""


class RolloutError(RollyardError):
    """A rollout plugin raised or returned something unusable for a task."""

    def __init__(self, message: str, *, plugin: str | None = None,
                 task_id: str | None = None) -> None:
        where = ", ".join(x for x in (
            f"plugin {plugin!r}" if plugin else "", f"task {task_id!r}" if task_id else "") if x)
        super().__init__(f"{message} ({where})" if where else message)
        self.plugin = plugin
        self.task_id = task_id


class TooManyFailures(RollyardError):
    """The share of failed samples passed the configured threshold; the run stops."""


class MissingTrainStack(RollyardError):
    """A command needs ``rollyard[train]`` (torch, Ray, megatron-core, transformers), which is
    not installed; the message is the one line the CLI prints."""

    def __init__(self, command: str) -> None:
        super().__init__(f"rollyard {command} needs rollyard[train]: pip install "
                         "'rollyard[train]'")
        self.command = command


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_ACTOR_INIT = re.compile(r"ray::(\w+)\.__init__\(\)")


def strip_ansi(text: str) -> str:
    """``text`` without terminal colour codes (Ray colours its remote tracebacks)."""
    return _ANSI.sub("", text)


def one_line(text: str) -> str:
    """``text`` as one line for the user: terminal colour codes removed, lines joined."""
    return " ".join(strip_ansi(text).split())


def remote_cause(exc: BaseException) -> BaseException:
    """The exception a Ray task or actor method raised, for one that Ray wrapped
    (``RayTaskError``, nested or not); any other exception as it is. Ray is never imported
    here: an exception from Ray means Ray is loaded."""
    ray_exceptions = sys.modules.get("ray.exceptions")
    while (ray_exceptions is not None and isinstance(exc, ray_exceptions.RayTaskError)
           and isinstance(exc.cause, BaseException) and exc.cause is not exc):
        exc = exc.cause
    return exc


def describe_error(exc: BaseException) -> str:
    """What went wrong, as one line for the user: a RollyardError's own message (it names
    what and where), the message a Ray actor's code raised without Ray's wrapper, else the
    exception's type and message."""
    cause = remote_cause(exc)
    ray_exceptions = sys.modules.get("ray.exceptions")
    if isinstance(cause, RollyardError):
        text = str(cause)
    elif (ray_exceptions is not None and isinstance(cause, ray_exceptions.RayActorError)
          and cause.actor_init_failed):
        # Ray keeps only the text of the creation task's error: ``ray::Class.__init__()``,
        # the traceback, and last the exception's own line (``ValueError: ...``)
        plain = strip_ansi(str(cause))
        lines = [line.strip() for line in plain.splitlines() if line.strip()]
        actor = _ACTOR_INIT.search(plain)
        text = (f"{actor.group(1) if actor else 'a Ray actor'} failed to start: "
                f"{lines[-1] if lines else cause}")
    else:
        text = f"{type(cause).__name__}: {cause}"
    return one_line(text)
