"""Base classes that plugins register: rollouts, transports, rewards, engines, commands.

Each kind has one constructor shape. A class may declare its options as a frozen dataclass
named ``Options`` (see :mod:`rollyard.options`); it then receives an instance of it, and a
class without one receives its plugin's ``add_options`` options as an instance of a generated
dataclass that is also the dict it received before (:class:`rollyard.options.LegacyOptions`).
"""

from __future__ import annotations

import argparse
import asyncio
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar, Protocol, runtime_checkable

from rollyard.config import ConfigView, RunConfig
from rollyard.configurable import Configurable, received_options
from rollyard.errors import TransportError
from rollyard.isolation.request import IsolatedEnvironment
from rollyard.types import GenerateRequest, GenerateResult, Sample, SamplingParams, Task


@runtime_checkable
class Tokenizer(Protocol):
    """What rollouts and rewards may use of the run's tokenizer (a Hugging Face tokenizer)."""

    eos_token_id: int | None

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, conversation: list[dict[str, Any]], **kwargs: Any) -> Any: ...


class Transport(Configurable, ABC):
    """Sends token ids to inference engines and returns tokens with their logprobs.

    Constructed as ``Transport(urls, options)``.
    """

    name: ClassVar[str] = ""

    def __init__(self, urls: Sequence[str], options: Any = None) -> None:
        self.urls = list(urls)
        self.options = received_options(type(self), options)

    @abstractmethod
    async def generate(self, request: GenerateRequest) -> GenerateResult:
        """Generate from ``request.input_ids``; raise EngineAborted or TransportError."""

    @abstractmethod
    async def health(self) -> dict[str, bool]:
        """Health of every engine, keyed by URL."""

    @abstractmethod
    async def weight_versions(self) -> dict[str, int]:
        """Weight version each engine is serving, keyed by URL."""

    @abstractmethod
    async def update_weights(self, model_dir: str, weight_version: int) -> None:
        """Make every engine load the Hugging Face checkpoint in ``model_dir`` and serve it as
        ``weight_version`` (SGLang ``/update_weights_from_disk``). A transport that sets
        :attr:`supports_partial_rollouts` also takes ``abort_running=True``."""

    #: Whether the weight-update methods take ``abort_running=True`` (the engines abort their
    #: requests before the update instead of finishing them on the old weights first) and an
    #: aborted generation raises EngineAborted with its ``partial`` output
    #: (``--partial-rollouts``).
    supports_partial_rollouts: ClassVar[bool] = False

    async def generate_batch(self, requests: Sequence[GenerateRequest], *,
                             return_exceptions: bool = False,
                             ) -> list[GenerateResult | TransportError]:
        """Generate for several requests at once (a group sharing its prompt): one result per
        request, in order. With ``return_exceptions`` a request that failed gives its
        TransportError (EngineAborted included) in its place instead of raising.

        The default sends each request through :meth:`generate` concurrently; transports
        that can send a batch in one call (SGLang's list form of ``/generate``) override it.
        """
        results = await asyncio.gather(*(self.generate(r) for r in requests),
                                       return_exceptions=return_exceptions)
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, TransportError):
                raise result
        return list(results)

    #: Whether the distributed weight-update methods below are implemented
    #: (``--weight-sync distributed``).
    supports_distributed_weight_sync: ClassVar[bool] = False

    async def weight_group_ranks(self) -> dict[str, int]:
        """How many ranks each engine takes in a weight-update group (its tensor-parallel
        size), keyed by URL."""
        raise self._no_distributed_sync()

    async def init_weights_update_group(self, *, master_address: str, master_port: int,
                                        rank_offsets: Mapping[str, int], world_size: int,
                                        group_name: str, backend: str,
                                        timeout: float) -> None:
        """Make every engine join the weight-update group whose rank 0 (the trainer) hosts
        the rendezvous at ``master_address:master_port``; engine ``url`` takes the ranks from
        ``rank_offsets[url]`` (SGLang ``/init_weights_update_group``). Raises TransportError
        naming an engine that could not join within ``timeout`` seconds."""
        raise self._no_distributed_sync()

    async def update_weights_from_distributed(self, buckets: Sequence[Sequence[Any]],
                                              weight_version: int, *, group_name: str,
                                              timeout: float) -> None:
        """Make every engine receive ``buckets`` (lists of
        :class:`rollyard.weight_transfer.TensorSpec`, one broadcast each) from rank 0 of
        ``group_name`` and serve them as ``weight_version`` (SGLang
        ``/update_weights_from_distributed``). The trainer broadcasts meanwhile. Takes
        ``abort_running`` as :meth:`update_weights` does."""
        raise self._no_distributed_sync()

    async def destroy_weights_update_group(self, group_name: str) -> dict[str, bool]:
        """Make every engine leave ``group_name``; whether each did, keyed by URL. Never
        raises for an engine that is gone."""
        raise self._no_distributed_sync()

    def _no_distributed_sync(self) -> NotImplementedError:
        return NotImplementedError(
            f"transport {self.name or type(self).__name__!r} does not implement the "
            "distributed weight update; use --weight-sync disk")

    async def close(self) -> None:
        """Release connections. Safe to call twice."""


#: The context length a RolloutContext built without one has: the tiny models'
#: ``max_position_embeddings`` (``rollyard.models.tiny.SIZES``), which the testing kit's
#: tokenizer belongs to.
DEFAULT_CONTEXT_LENGTH = 512


@dataclass
class RolloutContext:
    """What a rollout class is built from, once per run (per rollout worker).

    ``config`` is a read-only view of the run's configuration (``config.seed``,
    ``config["max_new_tokens"]``); ``options`` are the rollout's own options; ``sampling`` is
    the run's sampling (never None); ``rng`` is seeded from the run's seed and the worker;
    ``context_length`` is the most tokens a conversation may grow to; ``model_dir`` is the
    model's folder (None when built without one).
    Rewards are applied by the core after ``run_group`` returns.
    """

    #: Read-only, typed view of the run's configuration: every core option by name
    #: (``config.seed``, ``config.max_new_tokens``; ``config["seed"]``, the config.json data,
    #: for plugins written before RunConfig).
    config: Mapping[str, Any]
    #: The model's tokenizer: ``encode``, ``decode``, ``apply_chat_template``, ``eos_token_id``.
    tokenizer: Tokenizer
    #: Sends token ids to the run's engines: ``await transport.generate(request)``.
    transport: Transport
    #: Unused, kept in its place so that contexts built positionally by plugins written
    #: before rewards moved out of the context still work; the core applies rewards.
    rewards: Any = field(default=None, repr=False)
    #: The rollout's own options: an instance of its ``Options`` class (when it declares none,
    #: the generated dataclass of its plugin's ``add_options`` options, also a dict).
    options: Any = None
    #: Seeded from the run's seed and the rollout worker's index; for randomness in episodes.
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    #: The run's sampling (``--max-new-tokens``, ``--temperature``, ``--top-p``, ``--top-k``);
    #: never None.
    sampling: SamplingParams = field(default_factory=SamplingParams)
    #: The most tokens (prompt and response together) the model takes: the
    #: ``max_position_embeddings`` of the model folder's config.json in a run; the tiny
    #: models' 512 when not given (``check-plugin``, the pytest fixtures). A request whose
    #: input plus ``max_new_tokens`` exceeds it is refused by the engine.
    context_length: int = DEFAULT_CONTEXT_LENGTH
    #: The ids of the tokenizer's special tokens (EOS, chat-turn markers …); read from the
    #: tokenizer when not given.
    special_token_ids: frozenset[int] = frozenset()
    #: The Hugging Face folder of the model the run trains (config.json, tokenizer files),
    #: for a rollout that needs more of it than the tokenizer; None where a context is built
    #: without a model (the testing kit, a plugin's own tests).
    model_dir: str | None = None  # last, so positional construction keeps working

    def __post_init__(self) -> None:
        if not isinstance(self.config, ConfigView):  # a dict of core options, as tests pass
            self.config = ConfigView(RunConfig(**dict(self.config or {})))
        self.options = received_options(None, self.options)
        if self.sampling is None:
            self.sampling = SamplingParams()
        if not self.special_token_ids:
            self.special_token_ids = frozenset(
                int(i) for i in getattr(self.tokenizer, "all_special_ids", None) or ())


class Rollout(Configurable, ABC):
    """An environment: the tasks it poses and how one group of episodes runs.

    Constructed as ``Rollout(context)``.
    """

    name: ClassVar[str] = ""
    #: Rewards the core applies when the user names none: ``{reward name: weight}``.
    #: Empty means the rollout scores its samples itself.
    default_rewards: ClassVar[dict[str, float]] = {}
    #: Run the rollout workers in a venv of the plugin distribution's own, built from its
    #: declared requirements (``--rollout-env auto``; docs/isolation.md). Import the
    #: plugin's dependencies inside methods, never at module level: the core imports the
    #: plugin's module to list it and read its options.
    isolated: ClassVar[bool] = False
    #: The eval split is held out: no eval task id is also a training task id, which
    #: ``rollyard check-plugin`` then checks. Task ids need only be unique within a split,
    #: so without it an eval split may reuse training tasks (ids made from dataset indices).
    eval_held_out: ClassVar[bool] = False

    def __init__(self, context: RolloutContext) -> None:
        context.options = received_options(type(self), context.options)
        self.context = context

    @classmethod
    def isolated_environment(cls, options: Any) -> IsolatedEnvironment | None:
        """The venv these options need (None: as declared by `isolated` and the distribution's
        requirements). Called in the driver before anything starts; must not import heavy
        deps. A non-None answer isolates under ``--rollout-env auto``, is refused with its
        ``reason`` under ``shared``, and builds a venv with its ``requirements`` and the plugin
        distribution installed ``--no-deps`` (docs/isolation.md)."""
        return None

    @classmethod
    def reward_weights(cls, options: Any) -> dict[str, float]:
        """The rewards (and weights) the core applies when the user names none with
        ``--reward``. Override to let the plugin's own options change them."""
        return dict(cls.default_rewards)

    @abstractmethod
    def tasks(self, split: str) -> Sequence[Task]:
        """The tasks of ``split`` (``train`` or ``eval``), in a deterministic order."""

    @abstractmethod
    async def run_group(self, task: Task, n: int) -> list[Sample]:
        """Run ``n`` episodes of ``task`` and return their samples (scored or not)."""

    def metrics(self) -> dict[str, float]:
        """Environment metrics accumulated since the last call (then reset)."""
        return {}

    def solved(self, sample: Sample, task: Task) -> bool:
        """Whether a scored sample solves ``task``: what ``eval/pass@k`` counts. The default
        is a reward above 0; a rollout whose rewards give partial credit overrides it (the
        toy rollout counts an exact answer). Failed and aborted samples never count."""
        return sample.reward > 0

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to go on where this rollout stopped; saved with every
        checkpoint. The default keeps the state of ``context.rng``. A rollout that keeps more
        between groups (a curriculum, a replay buffer) overrides this and
        :meth:`load_state_dict`, extending the dict of ``super()``. Values must pickle."""
        return {"rng": self.context.rng.getstate()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned, on the rollout built for a resumed run."""
        if "rng" in state:
            self.context.rng.setstate(state["rng"])


@dataclass
class RewardContext:
    """What a reward class is built from: the run's tokenizer and its plugin's options."""

    #: The model's tokenizer.
    tokenizer: Tokenizer
    #: The reward's own options: an instance of its ``Options`` class (when it declares none,
    #: the generated dataclass of its plugin's ``add_options`` options, also a dict).
    options: Any = None

    def __post_init__(self) -> None:
        self.options = received_options(None, self.options)


class Reward(Configurable):
    """Scores a finished sample; may return one float or named components.

    Constructed as ``Reward(context)``. Override :meth:`score`, or :meth:`score_group` for
    group-relative rewards (at least one of them). Rewards that share costly work (running a
    program, calling a judge) name an evaluator and subclass
    :class:`rollyard.evaluators.EvaluatedReward`.
    """

    name: ClassVar[str] = ""
    #: The :class:`rollyard.evaluators.Evaluator` class whose result this reward reads, run
    #: once per group for every reward of a run that names it; None for plain rewards.
    evaluator: ClassVar[type | None] = None

    def __init__(self, context: RewardContext | None = None) -> None:
        cls = type(self)
        if cls.score is Reward.score and cls.score_group is Reward.score_group:
            raise TypeError(f"reward {cls.__qualname__} must override score or score_group")
        context = context if context is not None else RewardContext(tokenizer=None)
        context.options = received_options(cls, context.options)
        self.context = context

    async def score(self, sample: Sample, task: Task) -> float | dict[str, float]:
        """The sample's score: a finite float, or named finite components."""
        return (await self.score_group([sample], task))[0]

    async def score_group(self, samples: list[Sample],
                          task: Task) -> list[float | dict[str, float]]:
        """Score a whole group, one score per sample; override for group-relative rewards."""
        return [await self.score(s, task) for s in samples]


class EngineHandle(ABC):
    """A running inference engine: its URL and how to stop it."""

    url: str

    @abstractmethod
    def stop(self) -> None:
        """Stop the engine and wait for it to exit. Safe to call twice."""


class Engine(Configurable, ABC):
    """Launches an inference engine that serves the SGLang HTTP protocol.

    Constructed as ``Engine(options)``.
    """

    name: ClassVar[str] = ""

    def __init__(self, options: Any = None) -> None:
        self.options = received_options(type(self), options)

    @abstractmethod
    def launch(self, model_dir: str, port: int) -> EngineHandle:
        """Start an engine serving ``model_dir`` on ``port``; return once it is healthy."""


class Command(ABC):
    """A ``rollyard NAME`` subcommand contributed by a plugin."""

    name: ClassVar[str] = ""
    help: ClassVar[str] = ""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:  # noqa: B027
        """Declare this command's arguments (none by default)."""

    @abstractmethod
    def run(self, args: SimpleNamespace) -> int:
        """Run the command with the parsed arguments; return the process exit status."""
