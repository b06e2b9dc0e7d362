"""Evaluators: work that several rewards of a group need, done once per group.

Some rewards cannot score a sample from its tokens alone: they must run the program the model
wrote, call a judge or execute tool calls, and several rewards read the same outcome (code
golf's correctness, length and speed all come from one sandboxed run). The costly part is an
:class:`Evaluator`; the rewards that need it subclass :class:`EvaluatedReward` and name it::

    class RunTests(Evaluator[TestReport]):
        def __init__(self, context: RewardContext) -> None:
            super().__init__(context)
            self.sandbox = Sandbox()                   # built once per reward set

        async def evaluate(self, samples, task) -> list[TestReport]:
            return [await self.sandbox.test(s, task) for s in samples]

    class Passed(EvaluatedReward[TestReport]):
        name = "mine.passed"
        evaluator = RunTests

        async def score_evaluated(self, samples, task, results) -> list[Score]:
            return [float(r.all_passed) for r in results]

The core's :class:`~rollyard.rewards.RewardSet` builds one instance of each distinct evaluator
class among its rewards (from the ``RewardContext`` of the first reward that names it), runs it
once per group on the usable samples before any reward, and hands its results to every reward
that names it. There is one reward set per rollout worker and run, so evaluators hold
per-worker resources (a sandbox, a client, a thread pool) and are closed with the set; nothing
is shared across the process. A reward used alone, outside a reward set, builds an evaluator
of its own on first use (then each such reward evaluates the group itself).

An evaluator may accumulate metrics for the step (``metrics()``, reset on each call, as
:meth:`rollyard.Rollout.metrics`); the reward set returns the merged metrics of its evaluators.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

from rollyard.errors import PluginError
from rollyard.interfaces import Reward, RewardContext
from rollyard.types import Sample, Task

#: One sample's score: a finite float, or named finite components.
Score = float | dict[str, float]
#: What an evaluator produces per sample.
ResultT = TypeVar("ResultT")


class Evaluator(ABC, Generic[ResultT]):
    """Evaluates a group's samples once for every reward that reads the outcome.

    Constructed as ``Evaluator(context)`` with the ``RewardContext`` of the rewards that use
    it; construction is the place to refuse a machine that cannot evaluate (raise
    ConfigError), so a run fails before its first step rather than on every sample.
    """

    def __init__(self, context: RewardContext) -> None:
        self.context = context

    @abstractmethod
    async def evaluate(self, samples: list[Sample], task: Task) -> Sequence[ResultT]:
        """One result per sample, in order. Called once per group with its usable samples.

        A fault of one sample's evaluation that is not the model's (the sandbox broke) should
        mark that sample failed (``sample.fail(reason)``) and still return a result for
        it; raising fails every sample of the group with the error as reason.
        """

    def metrics(self) -> dict[str, float]:
        """Metrics accumulated since the last call (then reset); ``{}`` by default."""
        return {}

    async def close(self) -> None:
        """Release what the evaluator holds. Safe to call twice."""


class EvaluatedReward(Reward, Generic[ResultT]):
    """A reward computed from an :class:`Evaluator`'s results instead of from raw samples.

    Set ``evaluator`` to the evaluator class and implement :meth:`score_evaluated`. A reward
    set evaluates the group once and calls ``score_evaluated`` with the results; ``score`` and
    ``score_group`` (a reward used on its own) evaluate with an evaluator this reward builds
    on first use.
    """

    #: The evaluator whose results :meth:`score_evaluated` reads.
    evaluator: ClassVar[type[Evaluator[Any]]]

    def __init__(self, context: RewardContext) -> None:
        super().__init__(context)
        evaluator_of(self)  # a missing or wrong ``evaluator`` is refused here, by name
        if getattr(type(self), "evaluator", None) is None:
            raise PluginError(f"reward {self.name!r} is an EvaluatedReward without an "
                              "evaluator: set evaluator = <an Evaluator subclass>")
        self._own_evaluator: Evaluator[ResultT] | None = None

    @abstractmethod
    async def score_evaluated(self, samples: list[Sample], task: Task,
                              results: Sequence[ResultT]) -> list[Score]:
        """One score per sample, from ``results`` (``results[i]`` is ``samples[i]``'s)."""

    async def score_group(self, samples: list[Sample], task: Task) -> list[Score]:
        """Evaluate the group with this reward's own evaluator, then score it."""
        if self._own_evaluator is None:
            self._own_evaluator = self.evaluator(self.context)
        results = await self._own_evaluator.evaluate(samples, task)
        return await self.score_evaluated(samples, task, results)

    async def score(self, sample: Sample, task: Task) -> Score:
        """A group of one (group-relative rewards score a lone sample as the group's best)."""
        return (await self.score_group([sample], task))[0]


def evaluator_of(reward: Reward) -> type[Evaluator[Any]] | None:
    """The evaluator class a reward reads, or None for a reward that scores samples itself;
    PluginError when the declaration is unusable."""
    evaluator = getattr(type(reward), "evaluator", None)
    if evaluator is None:
        return None
    if not (isinstance(evaluator, type) and issubclass(evaluator, Evaluator)):
        raise PluginError(f"reward {reward.name!r}: 'evaluator' is {evaluator!r}, not an "
                        "Evaluator subclass")
    if not callable(getattr(reward, "score_evaluated", None)):
        raise PluginError(f"reward {reward.name!r} names evaluator {evaluator.__qualname__} but "
                        "has no score_evaluated(samples, task, results)")
    return evaluator
