"""A sample longer than the model's context fails alone, with the reason, and is counted; the
run goes on. The collector fails it at the boundary; the trainer fails any that reach it."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from rollyard import Reward, RewardContext, Rollout, RolloutContext, Sample, SampleStatus, Task
from rollyard.model_facts import model_max_tokens
from rollyard.rewards import RewardSet
from rollyard.run.collect import CollectSettings, collect_step
from rollyard.run.metrics import failure_reasons, sample_metrics

TASK = Task(id="t-long", prompt="say hi")


def sample(n_response: int, reward: float = 0.0) -> Sample:
    return Sample(tokens=[1, 2, 3] + [4] * n_response, prompt_len=3, loss_mask=[1] * n_response,
                  logprobs=[-0.5] * n_response, reward=reward, task_id=TASK.id, group_id="g")


class TwoLengths(Rollout):
    """Answers every task with a short (5 tokens) and a long (9 tokens) episode."""

    name = "two-lengths"

    def tasks(self, split: str) -> list[Task]:
        return [TASK]

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        return [sample(2), sample(6)]


class LengthReward(Reward):
    name = "length"

    async def score(self, sample: Sample, task: Task) -> float:
        return float(sample.response_len)


def collect(max_tokens: int | None) -> list[Sample]:
    rollout = TwoLengths(RolloutContext(config={}, tokenizer=None, transport=None, options={},
                                        rng=random.Random(0)))
    rewards = RewardSet({"length": LengthReward(RewardContext(tokenizer=None, options={}))},
                        {"length": 1.0})
    settings = CollectSettings(group_size=2, max_concurrent_groups=1, group_timeout_s=5.0,
                               max_tokens=max_tokens)
    return asyncio.run(collect_step(rollout, rewards, [TASK], settings))


def test_the_collector_fails_a_sample_longer_than_the_model_and_keeps_the_rest() -> None:
    short, long = collect(max_tokens=8)
    assert short.status is SampleStatus.COMPLETED and short.reward == 2.0
    assert long.status is SampleStatus.FAILED and long.reward == 0.0 and not long.rewards
    assert len(long.tokens) == 9  # kept for inspection, never trained on
    long.validate()
    assert long.metadata["failure"] == (
        "sample of task 't-long' is too long for the model: 9 tokens (prompt 3 + response 6) "
        "exceed its max_position_embeddings=8; lower --max-new-tokens or shorten the prompts")
    assert sample_metrics([short, long])["samples/failed_rate"] == 0.5
    assert failure_reasons([short, long])[0].startswith("1x sample of task 't-long' is too long")


def test_without_a_limit_nothing_is_checked_and_a_sample_that_fits_passes() -> None:
    assert all(s.status is SampleStatus.COMPLETED for s in collect(max_tokens=None))
    assert all(s.status is SampleStatus.COMPLETED for s in collect(max_tokens=9))


def test_the_limit_is_the_models_max_position_embeddings(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 256}))
    assert model_max_tokens(tmp_path) == 256
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert model_max_tokens(tmp_path) == 4096


def test_the_trainer_builds_its_model_for_the_same_context(tmp_path: Path) -> None:
    """One default for a config without max_position_embeddings, on both sides: the trainer's
    model check uses it too (a sliding window shorter than it is refused)."""
    from rollyard import ConfigError
    from rollyard.model_facts import DEFAULT_MAX_TOKENS
    from rollyard.training.model import check_hf_config

    config = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 16, "vocab_size": 512, "rms_norm_eps": 1e-6, "hidden_act": "silu",
              "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
              "use_sliding_window": True, "sliding_window": DEFAULT_MAX_TOKENS // 2}
    with pytest.raises(ConfigError, match=f"max_position_embeddings={DEFAULT_MAX_TOKENS}"):
        check_hf_config(config, "model/config.json")
    check_hf_config({**config, "sliding_window": DEFAULT_MAX_TOKENS}, "model/config.json")


def driver_side(max_len: int):
    """The driver-side half of TrainGroup.train (grpo), without its Ray ranks."""
    from rollyard.training import TrainConfig, TrainGroup
    from rollyard.training.algorithm import load_algorithm

    group = TrainGroup.__new__(TrainGroup)
    group.config = TrainConfig(algorithm="grpo")
    group.algorithm, group._algorithm_plugin = load_algorithm(group.config)
    group.max_len, group.vocab_size = max_len, 64
    return group


def test_the_trainer_fails_a_sample_too_long_for_the_model_instead_of_stopping() -> None:
    group = driver_side(max_len=8)
    samples = [sample(2, reward=0.0), sample(3, reward=1.0), sample(6, reward=1.0)]
    items, step, counts = group._items(samples)
    assert [len(item.tokens) for item in items] == [5, 6]
    assert step.sequences == 2 and counts["num_samples_too_long"] == 1.0
    assert samples[2].status is SampleStatus.FAILED
    assert "9 tokens (prompt 3 + response 6)" in samples[2].metadata["failure"]
    assert samples[0].usable and samples[1].usable


def test_the_trainer_drops_a_group_whose_rewards_do_not_differ() -> None:
    """The zero-variance rule of rollyard.model_facts, as the run's group draw applies it."""
    from dataclasses import replace

    from rollyard.run.group_draw import has_signal

    flat = [replace(sample(2, reward=0.5), group_id="flat"),
            replace(sample(3, reward=0.5 + 1e-12), group_id="flat")]
    signal = [sample(2, reward=0.0), sample(3, reward=1.0)]
    items, step, counts = driver_side(max_len=64)._items(flat + signal)
    assert [item.advantage for item in items] == pytest.approx([-1.0, 1.0], abs=1e-5)
    assert step.sequences == 2 and counts["num_groups_filtered"] == 1.0
    assert counts["zero_variance_share"] == 0.5
    assert not has_signal(flat) and has_signal(signal)
