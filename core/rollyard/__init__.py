"""rollyard: a plugin-based rollout framework for reinforcement learning of language models.

Plugins import only from this module::

    from rollyard import hookimpl, Rollout, Sample, Task
"""

from rollyard.algorithms import Algorithm
from rollyard.errors import (
    ConfigError,
    EngineAborted,
    EngineStartError,
    PluginError,
    RolloutError,
    RollyardError,
    SampleError,
    TooManyFailures,
    TransportError,
    UnknownPluginError,
)
from rollyard.hookspecs import hookimpl
from rollyard.interfaces import (
    Command,
    Engine,
    EngineHandle,
    IsolatedEnvironment,
    Reward,
    RewardContext,
    Rollout,
    RolloutContext,
    Transport,
)
from rollyard.types import (
    GenerateRequest,
    GenerateResult,
    Message,
    Sample,
    SampleStatus,
    SamplingParams,
    Task,
)

__all__ = [
    "Algorithm",
    "Command",
    "ConfigError",
    "Engine",
    "EngineAborted",
    "EngineHandle",
    "EngineStartError",
    "GenerateRequest",
    "GenerateResult",
    "IsolatedEnvironment",
    "Message",
    "PluginError",
    "Reward",
    "RewardContext",
    "Rollout",
    "RolloutContext",
    "RolloutError",
    "RollyardError",
    "Sample",
    "SampleError",
    "SampleStatus",
    "SamplingParams",
    "Task",
    "TooManyFailures",
    "Transport",
    "TransportError",
    "UnknownPluginError",
    "hookimpl",
]
