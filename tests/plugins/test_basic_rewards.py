"""The basic text rewards: exact match and character F1 against ``task.data["answer"]``."""

from __future__ import annotations

import asyncio

import pytest
from rollyard import RewardContext, Sample, SampleStatus, Task
from rollyard.rewards import RewardSet
from rollyard_plugins.basic_rewards import CharF1, ExactMatch

CONTEXT = RewardContext(tokenizer=None, options={})


def scored(reward_cls: type, completion: str, answer: str) -> float:
    sample = Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[-0.5],
                    task_id="t", metadata={"completion": completion})
    return asyncio.run(reward_cls(CONTEXT).score(sample, Task(id="t", prompt="",
                                                              data={"answer": answer})))


@pytest.mark.parametrize("completion, answer, expected", [
    ("abc", "abc", 1.0), ("  abc\n", "abc", 1.0), ("abc", " abc ", 1.0),
    ("abd", "abc", 0.0), ("ab", "abc", 0.0), ("", "abc", 0.0), ("ABC", "abc", 0.0),
])
def test_exact_match(completion, answer, expected):
    assert scored(ExactMatch, completion, answer) == expected


@pytest.mark.parametrize("completion, answer, expected", [
    ("abc", "abc", 1.0),            # f1 1, all in place
    ("ba", "ab", 0.5),              # f1 1, none in place
    ("abc", "ab", 0.4 + 1 / 3),     # precision 2/3, recall 1 -> f1 0.8; in place 2 of 3
    ("a", "ab", (2 / 3) / 2 + 0.25),  # precision 1, recall 1/2 -> f1 2/3; in place 1/2
    ("xyz", "ab", 0.0), ("", "ab", 0.0), ("ab", "", 0.0),
    (" ab ", "ab", 1.0),
])
def test_char_f1(completion, answer, expected):
    assert scored(CharF1, completion, answer) == pytest.approx(expected)


def test_char_f1_charges_characters_after_the_answer_like_missing_ones():
    # the answer followed by noise scores below a partial answer that stops
    assert scored(CharF1, "ab" + "x" * 22, "ab") < scored(CharF1, "a", "ab")
    assert scored(CharF1, "abab", "ab") == pytest.approx(0.5 * (2 / 3) + 0.5 * (2 / 4))


def test_char_f1_rises_as_the_answer_gets_closer():
    steps = ["x", "e", "ed", "edc", "edcb", "edcba"]
    values = [scored(CharF1, c, "edcba") for c in steps]
    assert values == sorted(values) and values[0] == 0.0 and values[-1] == 1.0


def test_missing_answer_fails_the_sample_with_the_task_id():
    sample = Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[-0.5],
                    task_id="q-9", metadata={"completion": "x"})
    rewards = RewardSet({"exact-match": ExactMatch(CONTEXT)}, {})
    asyncio.run(rewards.score_group([sample], Task(id="q-9", prompt="", data={})))
    assert sample.status is SampleStatus.FAILED
    assert "task 'q-9' has no data['answer']" in sample.metadata["failure"]


def test_register_rewards_registers_both(plugin_manager):
    from rollyard_plugins import basic_rewards

    record = plugin_manager.register(basic_rewards, name="basic-rewards", distribution="rollyard")
    assert record.registers == {"reward": ["exact-match", "char-f1"]}
    assert plugin_manager.get("reward", "char-f1") is CharF1
