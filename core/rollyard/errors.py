"""Typed errors. Each names what was wrong and where (plugin, entry point, option, task)."""

from __future__ import annotations


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
    """The engine aborted the request (finish_reason 'abort'); never a result."""


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
