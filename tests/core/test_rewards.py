"""RewardSet: weighted reward plugins applied to a group of samples."""

from __future__ import annotations

import asyncio

from rollyard import Reward, RewardContext, Sample, SampleStatus, Task
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


class RankInGroup(Reward):
    """Group-relative: 1.0 for the longest response of the group, else 0.0."""

    name = "rank"

    async def score_group(self, samples: list[Sample], task: Task) -> list[float]:
        longest = max(s.response_len for s in samples)
        return [float(s.response_len == longest) for s in samples]


class Broken(Reward):
    name = "broken"

    async def score(self, sample: Sample, task: Task) -> float:
        raise ZeroDivisionError("no reference answer")


class Short(Reward):
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


class Unusable(Reward):
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
