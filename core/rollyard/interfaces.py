"""Base classes that plugins register: rollouts, transports, rewards, engines, commands."""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from rollyard.types import GenerateRequest, GenerateResult, Sample, Task

if TYPE_CHECKING:
    from rollyard.rewards import RewardSet


class Transport:
    """Sends token ids to inference engines and returns tokens with their logprobs."""

    name: ClassVar[str] = ""

    def __init__(self, urls: Sequence[str], options: dict[str, Any] | None = None) -> None:
        self.urls = list(urls)
        self.options = dict(options or {})

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        raise NotImplementedError

    async def health(self) -> dict[str, bool]:
        """Health of every engine, keyed by URL."""
        raise NotImplementedError

    async def weight_versions(self) -> dict[str, int]:
        """Weight version each engine is serving, keyed by URL."""
        raise NotImplementedError

    async def update_weights(self, model_dir: str, weight_version: int) -> None:
        """Make every engine load the Hugging Face checkpoint in ``model_dir`` and serve it as
        ``weight_version`` (SGLang ``/update_weights_from_disk``)."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release connections. Safe to call twice."""


@dataclass
class RolloutContext:
    """What a rollout class is built from, once per run."""

    config: dict[str, Any]
    tokenizer: Any
    transport: Transport
    rewards: RewardSet
    options: dict[str, Any]
    rng: random.Random
    sampling: Any = None  # rollyard.types.SamplingParams chosen by the run
    extra: dict[str, Any] = field(default_factory=dict)


class Rollout:
    """An environment: the tasks it poses and how one group of episodes runs."""

    name: ClassVar[str] = ""
    #: Rewards the core applies when the user names none: ``{reward name: weight}``.
    #: Empty means the rollout scores its samples itself.
    default_rewards: ClassVar[dict[str, float]] = {}

    def __init__(self, context: RolloutContext) -> None:
        self.context = context

    @classmethod
    def reward_weights(cls, options: dict[str, Any]) -> dict[str, float]:
        """The rewards (and weights) the core applies when the user names none with
        ``--reward``. Override to let the plugin's own options change them."""
        return dict(cls.default_rewards)

    def tasks(self, split: str) -> Sequence[Task]:
        """The tasks of ``split`` (``train`` or ``eval``), in a deterministic order."""
        raise NotImplementedError

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        """Run ``n`` episodes of ``task`` and return their samples (scored or not)."""
        raise NotImplementedError

    def metrics(self) -> dict[str, float]:
        """Environment metrics accumulated since the last call (then reset)."""
        return {}


@dataclass
class RewardContext:
    tokenizer: Any
    options: dict[str, Any]


class Reward:
    """Scores a finished sample; may return one float or named components."""

    name: ClassVar[str] = ""

    def __init__(self, context: RewardContext) -> None:
        self.context = context

    async def score(self, sample: Sample, task: Task) -> float | dict[str, float]:
        raise NotImplementedError

    async def score_group(self, samples: list[Sample],
                          task: Task) -> list[float | dict[str, float]]:
        """Score a whole group; override for group-relative rewards."""
        return [await self.score(s, task) for s in samples]


class EngineHandle:
    """A running inference engine: its URL and how to stop it."""

    url: str

    def stop(self) -> None:
        raise NotImplementedError


class Engine:
    """Launches an inference engine that serves the SGLang HTTP protocol."""

    name: ClassVar[str] = ""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    def launch(self, model_dir: str, port: int) -> EngineHandle:
        raise NotImplementedError


class Command:
    """A ``rollyard NAME`` subcommand contributed by a plugin."""

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare this command's arguments."""

    def run(self, args: argparse.Namespace) -> int:
        """Run the command; return the process exit status."""
        raise NotImplementedError
