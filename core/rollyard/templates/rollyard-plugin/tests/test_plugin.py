"""The plugin's tests. The fixtures come with rollyard (its pytest plugin):
``rollyard_conformance``, ``rollyard_manager``, ``rollyard_tokenizer``, ``scripted_transport``.
"""

import asyncio
import random

import pytest
from rollyard import ConfigError, EngineAborted, RewardContext, RolloutContext, SampleStatus
from rollyard.rewards import RewardSet

from rollyard_myenv import plugin
from rollyard_myenv.env import MyenvOptions, SortLetters, make_tasks
from rollyard_myenv.reward import SortedMatch


def test_plugin_keeps_the_rollyard_contract(rollyard_conformance):
    """Registration, options, tasks, samples, rewards and engine faults, as a run sees them."""
    rollyard_conformance(plugin, name="myenv")


def test_registers_the_rollout_and_the_reward(rollyard_manager):
    record = rollyard_manager.register(plugin, name="myenv")
    assert record.errors == []
    assert rollyard_manager.get("rollout", "myenv") is SortLetters
    assert rollyard_manager.get("reward", "myenv-sorted") is SortedMatch


def build(transport, tokenizer, **options):
    """The rollout as a run builds it: ``config`` takes core options by name (the others keep
    their defaults) and ``options`` this plugin's, checked as the ``--myenv-*`` flags are."""
    return SortLetters(RolloutContext(config={"seed": 0}, tokenizer=tokenizer,
                                      transport=transport, options=options,
                                      rng=random.Random(0)))


def run_and_score(rollout, task, n):
    reward = SortedMatch(RewardContext(tokenizer=rollout.context.tokenizer))
    rewards = RewardSet({reward.name: reward}, {reward.name: 1.0})

    async def episode():
        samples = await rollout.run_group(task, n)
        await rewards.score_group(samples, task)
        return samples

    return asyncio.run(episode())


def test_right_answer_scores_one_and_a_wrong_one_less(rollyard_tokenizer, scripted_transport):
    task = make_tasks(MyenvOptions(num_tasks=10), seed=0)[0]
    wrong = task.data["answer"][::-1]
    transport = scripted_transport([task.data["answer"], wrong], tokenizer=rollyard_tokenizer)
    samples = run_and_score(build(transport, rollyard_tokenizer), task, 2)
    assert [s.status for s in samples] == [SampleStatus.COMPLETED] * 2
    assert samples[0].reward == 1.0
    assert 0.0 <= samples[1].reward < 1.0
    assert len(transport.requests) == 2


def test_an_engine_abort_becomes_an_aborted_sample(rollyard_tokenizer, scripted_transport):
    task = make_tasks(MyenvOptions(num_tasks=10), seed=0)[0]
    transport = scripted_transport([EngineAborted("engine restarted")],
                                   tokenizer=rollyard_tokenizer)
    samples = run_and_score(build(transport, rollyard_tokenizer), task, 2)
    assert [s.status for s in samples] == [SampleStatus.ABORTED] * 2
    assert "engine restarted" in samples[0].failure


def test_options_shape_the_tasks():
    rollout = build(None, None, num_tasks=50, word_length=3)
    assert rollout.context.options == MyenvOptions(num_tasks=50, word_length=3)
    tasks = [*rollout.tasks("train"), *rollout.tasks("eval")]
    assert len(tasks) == 50
    assert all(len(t.data["answer"]) == 3 for t in tasks)
    assert rollout.tasks("train") == build(None, None, num_tasks=50, word_length=3).tasks("train")


def test_too_many_tasks_is_a_clear_error():
    with pytest.raises(ConfigError, match="--myenv-num-tasks 100 with --myenv-word-length 2: "
                                          "choose 2..64"):
        build(None, None, num_tasks=100, word_length=2)
