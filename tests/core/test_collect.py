"""The core's boundary: whatever a rollout plugin returns or raises, the step goes on with
failed/aborted samples that say why, and valid samples are scored."""

import asyncio
import math

from rollyard import Reward, Rollout, RolloutContext, Sample, SampleStatus, Task
from rollyard.rewards import RewardSet
from rollyard.run.collect import CollectSettings, collect_step
from rollyard.run.metrics import failure_reasons, sample_metrics

TASK = Task(id="t-1", prompt="say hi", data={"answer": "hi"})
SETTINGS = CollectSettings(group_size=2, max_concurrent_groups=2, group_timeout_s=1.0)


def good_sample(n_response: int = 2) -> Sample:
    return Sample(tokens=[1, 2, 3] + [4] * n_response, prompt_len=3, loss_mask=[1] * n_response,
                  logprobs=[-0.5] * n_response, task_id="t-1", group_id="g", completion="hi")


class Scripted(Rollout):
    name = "scripted"

    def __init__(self, behaviour) -> None:
        super().__init__(RolloutContext({}, None, None, None, {}, None))
        self.behaviour = behaviour

    def tasks(self, split):
        return [TASK]

    async def run_group(self, task, n):
        return await self.behaviour(task, n)


class LengthReward(Reward):
    name = "length"

    async def score(self, sample, task):
        return float(sample.response_len)


def collect(behaviour, rewards=None, tasks=(TASK,)):
    rewards = rewards or RewardSet({}, {})
    return asyncio.run(collect_step(Scripted(behaviour), rewards, list(tasks), SETTINGS))


def test_valid_samples_are_scored_by_the_reward_set():
    async def ok(task, n):
        return [good_sample(1), good_sample(3)]

    samples = collect(ok, RewardSet({"length": LengthReward(None)}, {"length": 0.5}))
    assert [s.reward for s in samples] == [0.5, 1.5]
    assert [s.rewards for s in samples] == [{"length": 1.0}, {"length": 3.0}]
    assert all(s.status is SampleStatus.COMPLETED for s in samples)


def test_malformed_sample_becomes_failed_with_field_and_task():
    async def bad(task, n):
        broken = good_sample()
        broken.logprobs = [math.nan, -1.0]
        return [good_sample(), broken]

    samples = collect(bad)
    assert samples[0].usable
    assert samples[1].status is SampleStatus.FAILED
    assert "'logprobs'" in samples[1].metadata["failure"]
    assert "'t-1'" in samples[1].metadata["failure"]


def test_raising_rollout_fails_its_group_and_records_the_reason():
    async def boom(task, n):
        raise RuntimeError("environment exploded")

    samples = collect(boom)
    assert len(samples) == SETTINGS.group_size
    assert all(s.status is SampleStatus.FAILED for s in samples)
    assert "environment exploded" in samples[0].metadata["failure"]
    assert sample_metrics(samples)["samples/failed_rate"] == 1.0
    assert "2x" in failure_reasons(samples)[0]


def test_slow_rollout_is_aborted_after_the_timeout():
    async def slow(task, n):
        await asyncio.sleep(30)

    samples = collect(slow)
    assert all(s.status is SampleStatus.ABORTED for s in samples)
    assert "timed out" in samples[0].metadata["failure"]


def test_non_sample_return_values_are_rejected():
    async def wrong(task, n):
        return [{"tokens": [1]}]

    (sample,) = collect(wrong)
    assert sample.status is SampleStatus.FAILED
    assert "not a Sample" in sample.metadata["failure"]


def test_concurrency_is_bounded():
    running, peak = 0, 0

    async def tracked(task, n):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return [good_sample()]

    tasks = [Task(id=f"t-{i}", prompt="p") for i in range(6)]
    samples = collect(tracked, tasks=tasks)
    assert len(samples) == 6
    assert peak == SETTINGS.max_concurrent_groups


def test_a_reward_that_breaks_a_sample_fails_only_that_sample():
    class Vandal(Reward):
        name = "vandal"

        async def score(self, sample, task):
            if sample.response_len == 3:
                sample.loss_mask.append(1)  # leaves the sample inconsistent
            return 1.0

    async def ok(task, n):
        return [good_sample(1), good_sample(3)]

    first, second = collect(ok, RewardSet({"vandal": Vandal(None)}, {"vandal": 1.0}))
    assert first.usable and first.reward == 1.0
    assert second.status is SampleStatus.FAILED
    assert "'loss_mask'" in second.failure


def test_a_legacy_failure_key_set_by_a_rollout_or_a_reward_fails_the_sample():
    class OldJudge(Reward):  # written before Sample.failure: the key only, status untouched
        name = "old-judge"

        async def score(self, sample, task):
            if sample.response_len == 3:
                sample.metadata["failure"] = "old judge: no verdict"
            return 1.0

    async def old_rollout(task, n):
        lost, kept, judged = good_sample(1), good_sample(2), good_sample(3)
        lost.metadata["failure"] = "old rollout: tool crashed"
        return [lost, kept, judged]

    lost, kept, judged = collect(old_rollout, RewardSet({"old-judge": OldJudge(None)},
                                                        {"old-judge": 1.0}))
    assert (lost.status, lost.failure, lost.reward) == (SampleStatus.FAILED,
                                                        "old rollout: tool crashed", 0.0)
    assert kept.usable and kept.failure is None and kept.reward == 1.0
    assert (judged.status, judged.failure) == (SampleStatus.FAILED, "old judge: no verdict")
    assert failure_reasons([lost, kept, judged]) == ["1x old rollout: tool crashed",
                                                     "1x old judge: no verdict"]


def test_completions_edited_through_the_old_key_or_the_field_reach_both_kinds_of_reward():
    seen: list[tuple[str | None, str]] = []

    class Reader(Reward):
        name = "reader"

        async def score(self, sample, task):
            seen.append((sample.completion, sample.metadata["completion"]))
            return 0.0

    async def mixed(task, n):
        old, new = good_sample(), good_sample()  # made with completion "hi", as the helpers do
        old.metadata["completion"] = "edited by an old plugin"
        new.completion = "edited by a new plugin"
        return [old, new]

    collect(mixed, RewardSet({"reader": Reader(None)}, {"reader": 1.0}))
    assert seen == [("edited by an old plugin",) * 2, ("edited by a new plugin",) * 2]


def test_a_sample_made_without_a_metadata_dict_fails_naming_the_field():
    async def bad(task, n):
        return [Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[-0.1],
                       metadata=None), good_sample()]

    broken, kept = collect(bad)
    assert broken.status is SampleStatus.FAILED and "'metadata'" in broken.failure
    assert kept.usable
