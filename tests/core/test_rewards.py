"""RewardSet: weighted reward plugins applied to a group of samples, and the evaluators
whose one run per group several rewards read."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from rollyard import PluginError, Reward, RewardContext, Sample, SampleStatus, Task
from rollyard.evaluators import EvaluatedReward, Evaluator, Score
from rollyard.rewards import RewardSet

TASK = Task(id="task-7", prompt="say ab", data={"answer": "ab"})


class Length(Reward):
    """Number of response tokens."""

    name = "length"

    async def score(self, sample: Sample, task: Task) -> float:
        return float(sample.response_len)


class Parts(Reward):
    """Named components: a dict score."""

    name = "parts"

    async def score(self, sample: Sample, task: Task) -> dict[str, float]:
        return {"format": 0.5, "tokens": float(sample.response_len)}


class GroupReward(Reward):
    """A group-relative reward: ``score`` (abstract on Reward) scores a group of one."""

    async def score(self, sample: Sample, task: Task) -> Score:
        return (await self.score_group([sample], task))[0]


class RankInGroup(GroupReward):
    """Group-relative: 1.0 for the longest response of the group, else 0.0."""

    name = "rank"

    async def score_group(self, samples: list[Sample], task: Task) -> list[float]:
        longest = max(s.response_len for s in samples)
        return [float(s.response_len == longest) for s in samples]


class Broken(Reward):
    name = "broken"

    async def score(self, sample: Sample, task: Task) -> float:
        raise ZeroDivisionError("no reference answer")


class Short(GroupReward):
    """Returns one score too few."""

    name = "short"

    async def score_group(self, samples: list[Sample], task: Task) -> list[float]:
        return [1.0] * (len(samples) - 1)


def sample(response_len: int, status: SampleStatus = SampleStatus.COMPLETED) -> Sample:
    return Sample(tokens=[1] + [2] * response_len, prompt_len=1, loss_mask=[1] * response_len,
                  logprobs=[-0.1] * response_len, status=status, task_id=TASK.id)


def make_set(weights: dict[str, float], *classes: type[Reward]) -> RewardSet:
    context = RewardContext(tokenizer=None, options={})
    return RewardSet({cls.name: cls(context) for cls in classes}, weights)


def score(rewards: RewardSet, samples: list[Sample]) -> list[Sample]:
    asyncio.run(rewards.score_group(samples, TASK))
    for s in samples:
        s.validate()
    return samples


def test_weighted_sum_of_float_rewards():
    samples = score(make_set({"length": 0.5, "rank": 2.0}, Length, RankInGroup),
                    [sample(2), sample(4)])
    assert [s.rewards for s in samples] == [{"length": 2.0, "rank": 0.0},
                                            {"length": 4.0, "rank": 1.0}]
    assert [s.reward for s in samples] == [1.0, 4.0]


def test_unweighted_rewards_count_once():
    rewards = make_set({}, Length)
    assert rewards.weights == {"length": 1.0}
    assert score(rewards, [sample(3)])[0].reward == 3.0


def test_dict_score_becomes_named_components():
    [s] = score(make_set({"parts": 2.0, "length": 1.0}, Parts, Length), [sample(3)])
    assert s.rewards == {"parts/format": 0.5, "parts/tokens": 3.0, "length": 3.0}
    assert s.reward == 2.0 * (0.5 + 3.0) + 3.0


def test_raising_reward_fails_the_samples_with_the_reason():
    samples = score(make_set({}, Length, Broken), [sample(2), sample(3)])
    for s in samples:
        assert s.status is SampleStatus.FAILED
        assert s.reward == 0.0
        assert s.metadata["failure"] == ("reward 'broken' raised "
                                         "ZeroDivisionError('no reference answer')")


def test_wrong_number_of_scores_fails_the_samples():
    samples = score(make_set({}, Short), [sample(2), sample(3)])
    assert all(s.status is SampleStatus.FAILED for s in samples)
    assert samples[0].metadata["failure"] == ("reward 'short' raised "
                                              "ValueError('returned 1 scores for 2 samples')")


def test_unusable_samples_are_not_scored():
    aborted, done = sample(0, SampleStatus.ABORTED), sample(2)
    score(make_set({}, Length, RankInGroup), [aborted, done])
    assert aborted.rewards == {} and aborted.reward == 0.0
    assert done.rewards == {"length": 2.0, "rank": 1.0}  # ranked among usable samples only


def test_empty_reward_set_leaves_samples_alone():
    rewards = make_set({})
    assert not rewards
    [s] = score(rewards, [sample(2)])
    assert s.rewards == {} and s.reward == 0.0 and s.status is SampleStatus.COMPLETED


class Unusable(GroupReward):
    """Scores the first sample NaN and the second with a string."""

    name = "unusable"

    async def score_group(self, samples: list[Sample], task: Task) -> list:
        return [{"ok": 1.0, "bad": float("nan")}, "high"]


def test_non_numeric_or_non_finite_scores_fail_the_samples():
    samples = score(make_set({}, Unusable), [sample(1), sample(2)])
    assert all(s.status is SampleStatus.FAILED for s in samples)
    assert samples[0].metadata["failure"] == ("reward 'unusable' raised ValueError('returned "
                                              "nan; scores must be finite numbers')")


def test_numpy_scores_are_accepted():
    import numpy as np

    class NumpyScore(Reward):
        name = "numpy"

        async def score(self, sample: Sample, task: Task) -> float:
            return np.float32(0.5)

    [s] = score(make_set({}, NumpyScore), [sample(1)])
    assert s.rewards == {"numpy": 0.5} and type(s.rewards["numpy"]) is float


# ---------------------------------------------------------------- evaluators


class CountLetters(Evaluator[int]):
    """Counts the letters of each completion, and how often it was asked to."""

    built: list[CountLetters] = []

    def __init__(self, context: RewardContext) -> None:
        super().__init__(context)
        self.calls: list[int] = []
        self.closed = False
        CountLetters.built.append(self)

    async def evaluate(self, samples: list[Sample], task: Task) -> list[int]:
        self.calls.append(len(samples))
        return [sum(c.isalpha() for c in s.metadata.get("completion", "")) for s in samples]

    def metrics(self) -> dict[str, float]:
        return {"letters/groups": float(len(self.calls))}

    async def close(self) -> None:
        self.closed = True


class Letters(EvaluatedReward[int]):
    name = "letters"
    evaluator = CountLetters

    async def score_evaluated(self, samples: list[Sample], task: Task,
                              results: Sequence[int]) -> list[Score]:
        return [float(n) for n in results]


class MostLetters(EvaluatedReward[int]):
    """Group-relative, from the same evaluation."""

    name = "most_letters"
    evaluator = CountLetters

    async def score_evaluated(self, samples: list[Sample], task: Task,
                              results: Sequence[int]) -> list[Score]:
        return [float(n == max(results)) for n in results]


def said(text: str, status: SampleStatus = SampleStatus.COMPLETED) -> Sample:
    s = sample(2, status)
    s.metadata["completion"] = text
    return s


def test_an_evaluator_runs_once_per_group_for_every_reward_that_reads_it():
    CountLetters.built.clear()
    rewards = make_set({"letters": 1.0, "most_letters": 10.0, "length": 0.0},
                       Letters, MostLetters, Length)
    [evaluator] = CountLetters.built  # one instance for both rewards
    assert rewards.evaluators == {CountLetters: evaluator}
    assert rewards.reads == {"letters": CountLetters, "most_letters": CountLetters}
    samples = score(rewards, [said("ab"), said("abc!"), said("x", SampleStatus.ABORTED)])
    assert evaluator.calls == [2]  # once, on the usable samples only
    assert [s.rewards for s in samples[:2]] == [
        {"letters": 2.0, "most_letters": 0.0, "length": 2.0},
        {"letters": 3.0, "most_letters": 1.0, "length": 2.0}]
    assert [s.reward for s in samples] == [2.0, 13.0, 0.0]
    assert rewards.metrics() == {"letters/groups": 1.0}
    asyncio.run(rewards.close())
    assert evaluator.closed


def test_each_reward_set_builds_its_own_evaluators():
    first, second = make_set({}, Letters), make_set({}, Letters)
    assert first.evaluators[CountLetters] is not second.evaluators[CountLetters]


def test_an_evaluated_reward_used_alone_evaluates_for_itself():
    reward = MostLetters(RewardContext(tokenizer=None, options={}))
    assert asyncio.run(reward.score_group([said("ab"), said("abc")], TASK)) == [0.0, 1.0]
    assert asyncio.run(reward.score(said("ab"), TASK)) == 1.0


class Crashes(CountLetters):
    async def evaluate(self, samples: list[Sample], task: Task) -> list[int]:
        raise OSError("judge unreachable")


class ReadsCrashes(Letters):
    name = "reads_crashes"
    evaluator = Crashes


class OneShort(CountLetters):
    async def evaluate(self, samples: list[Sample], task: Task) -> list[int]:
        return [1] * (len(samples) - 1)


class ReadsOneShort(Letters):
    name = "reads_one_short"
    evaluator = OneShort


def test_a_raising_or_miscounting_evaluator_fails_the_samples_before_any_reward():
    samples = score(make_set({}, Length, ReadsCrashes), [said("ab"), said("c")])
    for s in samples:
        assert s.status is SampleStatus.FAILED and s.reward == 0.0 and s.rewards == {}
        assert s.metadata["failure"] == ("evaluator Crashes (of reward 'reads_crashes') "
                                         "raised OSError('judge unreachable')")
    [s] = score(make_set({}, ReadsOneShort), [said("ab")])
    assert s.metadata["failure"] == ("evaluator OneShort (of reward 'reads_one_short') "
                                     "raised ValueError('returned 0 results for 1 samples')")


def test_a_reward_naming_no_evaluator_or_a_non_evaluator_is_refused_by_name():
    class Misdeclared(Letters):
        name = "misdeclared"
        evaluator = Length  # a Reward, not an Evaluator

    with pytest.raises(PluginError, match=r"reward 'misdeclared': 'evaluator' is .*Length"):
        make_set({}, Misdeclared)

    class Undeclared(EvaluatedReward[int]):
        name = "undeclared"

        async def score_evaluated(self, samples: list[Sample], task: Task,
                                  results: Sequence[int]) -> list[Score]:
            return [0.0] * len(results)

    with pytest.raises(PluginError, match="reward 'undeclared' is an EvaluatedReward without "
                                          "an evaluator"):
        make_set({}, Undeclared)


def test_the_old_import_path_rollyard_evaluation_still_gives_the_same_classes() -> None:
    import importlib
    import sys

    sys.modules.pop("rollyard.evaluation", None)
    with pytest.warns(DeprecationWarning, match="rollyard.evaluators"):
        old = importlib.import_module("rollyard.evaluation")
    assert (old.Evaluator, old.EvaluatedReward, old.Score) == (Evaluator, EvaluatedReward, Score)
