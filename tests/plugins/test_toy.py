"""The toy environments (copy / reverse a word): tasks, splits, options and one episode group
run end to end through a transport, the project's tokenizer and the basic rewards."""

from __future__ import annotations

import argparse
import asyncio
import random
import re

import pytest
from rollyard import (
    ConfigError,
    EngineAborted,
    GenerateRequest,
    RewardContext,
    RolloutContext,
    SampleStatus,
    SamplingParams,
    Transport,
    TransportError,
)
from rollyard.rewards import RewardSet
from rollyard.testing import ScriptedTransport
from rollyard.train_flags import TrainFlags
from rollyard_plugins import basic_rewards, toy


def make_rollout(options: dict | None = None, seed: int = 0, tokenizer=None,
                 transport: Transport | None = None) -> toy.StringOperationRollout:
    return toy.StringOperationRollout(RolloutContext(
        config={"seed": seed}, tokenizer=tokenizer, transport=transport,
        options=options or {}, rng=random.Random(seed),
        sampling=SamplingParams(max_new_tokens=8, seed=seed)))


# --------------------------------------------------------------------------- tasks


@pytest.mark.parametrize("operation", ["copy", "reverse"])
def test_tasks_are_deterministic_and_answered(operation):
    first = toy.make_tasks(operation, 50, seed=3)
    assert first == toy.make_tasks(operation, 50, seed=3)
    assert first != toy.make_tasks(operation, 50, seed=4)
    words = [t.data["word"] for t in first]
    assert len(set(words)) == 50
    for task in first:
        word = task.data["word"]
        assert re.fullmatch(r"[abcde]{2,4}", word)
        assert task.prompt == [{"role": "user", "content": f"{operation}: {word}"}]
        assert task.data["answer"] == (word if operation == "copy" else word[::-1])
    assert [t.id for t in first[:2]] == [f"{operation}-0000", f"{operation}-0001"]


def test_splits_are_disjoint_and_cover_every_task():
    rollout = make_rollout({"num_tasks": 40})
    train, evaluation = rollout.tasks("train"), rollout.tasks("eval")
    assert (len(train), len(evaluation)) == (32, 8)
    assert not {t.data["word"] for t in train} & {t.data["word"] for t in evaluation}
    assert {t.id for t in train} | {t.id for t in evaluation} == {t.id for t in
                                                                    toy.make_tasks("copy", 40, 0)}


def test_same_seed_same_tasks_other_seed_other_tasks():
    assert make_rollout(seed=1).tasks("train") == make_rollout(seed=1).tasks("train")
    assert make_rollout(seed=1).tasks("train") != make_rollout(seed=2).tasks("train")


def test_default_options_copy_200_words():
    rollout = make_rollout()
    assert len(rollout.tasks("train")) + len(rollout.tasks("eval")) == 200
    assert all(t.id.startswith("copy-") for t in rollout.tasks("train"))


@pytest.mark.parametrize("options, message", [
    ({"operation": "rotate"}, "--toy-operation 'rotate': choose one of ['copy', 'reverse']"),
    ({"num_tasks": "ten"}, "--toy-num-tasks: expected int, got 'ten'"),
    ({"num_tasks": 1}, "--toy-num-tasks 1: choose 2..775"),
    ({"num_tasks": 5000}, "--toy-num-tasks 5000: choose 2..775"),
])
def test_bad_options_name_the_flag(options, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        make_rollout(options)


def test_flags_reach_the_rollout_as_typed_options(plugin_manager):
    plugin_manager.register(toy, name="toy", distribution="rollyard")
    parser = argparse.ArgumentParser()
    flags = TrainFlags(parser, plugin_manager)
    argv = ["--toy-operation", "reverse", "--toy-num-tasks", "10"]
    config = flags.parse(argv)
    options = config.options_for(toy.StringOperationRollout, "toy")
    assert options == toy.ToyOptions(operation="reverse", num_tasks=10)
    rollout = make_rollout(options)
    assert rollout.context.options is options
    assert rollout.tasks("eval")[0].id.startswith("reverse-")
    assert config.to_data()["toy"] == {"operation": "reverse", "num_tasks": 10}
    with pytest.raises(SystemExit):
        parser.parse_args(["--toy-operation", "rotate"])


def test_register_rollouts_registers_toy_with_its_default_rewards(plugin_manager):
    plugin_manager.register(toy, name="toy", distribution="rollyard")
    plugin_manager.register(basic_rewards, name="basic-rewards", distribution="rollyard")
    rollout_cls = plugin_manager.get("rollout", "toy")
    assert rollout_cls is toy.StringOperationRollout
    assert set(rollout_cls.default_rewards) <= set(plugin_manager.names("reward"))


# --------------------------------------------------------------------------- episodes


def answering(tokenizer, fail_index: int = -1, error_index: int = -1) -> ScriptedTransport:
    """A scripted engine that plays a perfect model: reads the word from the rendered prompt
    and answers it. Episode ``fail_index`` is aborted by the engine and ``error_index`` hits a
    transport error."""

    def reply(request: GenerateRequest) -> list[int] | Exception:
        index = int(request.session_id.rsplit("/", 1)[1])
        if index == fail_index:
            return EngineAborted("aborted by the engine", url=transport.urls[0])
        if index == error_index:
            return TransportError("connection refused", url=transport.urls[0])
        prompt = tokenizer.decode(request.input_ids)
        operation, word = re.search(r"(copy|reverse): (\w+)", prompt).groups()
        answer = toy.OPERATIONS[operation](word)
        return [*tokenizer.encode(answer, add_special_tokens=False), tokenizer.eos_token_id]

    transport = ScriptedTransport([reply], tokenizer=tokenizer, logprob=-0.25, weight_version=3)
    return transport


@pytest.fixture(scope="module")
def tokenizer():
    from rollyard.models.tokenizer import train_tokenizer

    return train_tokenizer()


def test_run_group_scores_a_perfect_answer(tokenizer):
    transport = answering(tokenizer)
    rollout = make_rollout({"operation": "reverse", "num_tasks": 20}, tokenizer=tokenizer,
                           transport=transport)
    task = rollout.tasks("train")[0]
    samples = asyncio.run(rollout.run_group(task, 4))
    context = RewardContext(tokenizer=tokenizer, options={})
    rewards = RewardSet({"exact-match": basic_rewards.ExactMatch(context),
                         "char-f1": basic_rewards.CharF1(context)},
                        toy.StringOperationRollout.default_rewards)
    asyncio.run(rewards.score_group(samples, task))
    assert len(samples) == 4 and len({s.group_id for s in samples}) == 1
    for sample in samples:
        sample.validate()
        assert sample.status is SampleStatus.COMPLETED
        assert sample.metadata["completion"] == task.data["answer"]
        assert sample.rewards == {"exact-match": 1.0, "char-f1": 1.0} and sample.reward == 2.0
        assert sample.weight_version == 3 and sample.task_id == task.id
    assert [r.sampling.seed for r in transport.requests] == [0, 1, 2, 3]
    assert all(tokenizer.eos_token_id in r.sampling.stop_token_ids for r in transport.requests)


def test_run_group_keeps_aborted_and_failed_episodes_with_the_reason(tokenizer):
    transport = answering(tokenizer, fail_index=1, error_index=2)
    rollout = make_rollout({"num_tasks": 20}, tokenizer=tokenizer, transport=transport)
    samples = asyncio.run(rollout.run_group(rollout.tasks("eval")[0], 3))
    for sample in samples:
        sample.validate()
    assert [s.status for s in samples] == [SampleStatus.COMPLETED, SampleStatus.ABORTED,
                                           SampleStatus.FAILED]
    engine = transport.urls[0]
    assert samples[1].metadata["failure"] == f"aborted by the engine [engine {engine}]"
    assert samples[2].metadata["failure"] == f"connection refused [engine {engine}]"
    assert samples[1].response_len == samples[2].response_len == 0
