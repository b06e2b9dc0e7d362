"""The ``verifiers`` rollout against the real embedded engine: a real verifiers environment,
its ``null`` harness process, the bridge's HTTP face and the ``sglang`` transport."""

from __future__ import annotations

import asyncio
import math
import random
from pathlib import Path
from typing import Any

import pytest
from rollyard import RolloutContext, RolloutError, Sample, SampleStatus, SamplingParams
from rollyard.rewards import RewardSet
from rollyard_plugins.sglang_transport import SGLangTransport
from rollyard_verifiers.rollout import VerifiersRollout

pytestmark = pytest.mark.slow


def make_rollout(model_dir: Path, engine_url: str, **options: Any) -> VerifiersRollout:
    from transformers import AutoTokenizer

    context = RolloutContext(
        config={}, tokenizer=AutoTokenizer.from_pretrained(str(model_dir)),
        transport=SGLangTransport([engine_url], {"retries": 0}), rewards=RewardSet({}, {}),
        options={"env": "rollyard_vf_arith", "concurrency": 8, "max_turns": 1, **options},
        rng=random.Random(0), sampling=SamplingParams(max_new_tokens=8, temperature=1.0))
    return VerifiersRollout(context)


def run_groups(rollout: VerifiersRollout, n: int, count: int) -> list[list[Sample]]:
    async def main() -> list[list[Sample]]:
        tasks = rollout.tasks("train")[:count]
        try:
            return list(await asyncio.gather(*(rollout.run_group(t, n) for t in tasks)))
        finally:
            await rollout.context.transport.close()
    return asyncio.run(main())


def test_twelve_samples_in_groups_of_four(tiny_model_dir, engine_url, test_envs) -> None:
    rollout = make_rollout(tiny_model_dir, engine_url)
    assert [t.id for t in rollout.tasks("train")] == ["add-0", "add-1", "add-2", "add-3"]
    groups = run_groups(rollout, n=4, count=3)
    assert [len(g) for g in groups] == [4, 4, 4]
    for group, task_id in zip(groups, ["add-0", "add-1", "add-2"]):
        assert len({s.group_id for s in group}) == 1
        for sample in group:
            sample.validate()
            assert sample.task_id == task_id
            assert sample.status in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED), \
                sample.metadata
            assert 1 <= sample.response_len <= 8
            assert len(sample.logprobs) == len(sample.loss_mask) == sample.response_len
            assert sum(sample.loss_mask) == sample.response_len  # single turn: all sampled
            assert all(math.isfinite(lp) and lp <= 0 for lp in sample.logprobs)
            assert set(sample.rewards) == {"correct", "brief"}
            assert sample.reward == pytest.approx(
                sample.rewards["correct"] + 0.2 * sample.rewards["brief"])
            assert sample.weight_version == 0
            truncated = sample.status == SampleStatus.TRUNCATED
            assert truncated == (sample.response_len == 8 and
                                 sample.tokens[-1] != rollout.context.tokenizer.eos_token_id)
    metrics = rollout.metrics()
    assert set(metrics) == {"verifiers/reward_mean", "verifiers/error_rate",
                            "verifiers/truncated_rate", "verifiers/num_turns_mean"}
    assert metrics["verifiers/error_rate"] == 0.0
    assert metrics["verifiers/num_turns_mean"] == 1.0
    expected = sum(s.reward for g in groups for s in g) / 12
    assert metrics["verifiers/reward_mean"] == pytest.approx(expected)
    assert rollout.metrics() == {}  # reset after reading


def test_an_unreachable_engine_fails_samples_with_the_reason(tiny_model_dir, test_envs) -> None:
    rollout = make_rollout(tiny_model_dir, "http://127.0.0.1:9")  # nothing listens there
    for _ in range(2):  # a second event loop reuses the rollout (a new run phase)
        [group] = run_groups(rollout, n=3, count=1)
        assert [s.status for s in group] == [SampleStatus.FAILED] * 3
        for sample in group:
            sample.validate()
            assert "127.0.0.1:9" in sample.metadata["failure"]
            assert sample.reward == 0.0
        assert rollout.metrics()["verifiers/error_rate"] == 1.0


@pytest.mark.parametrize("env_id", ["no_such_vf_env", "no_such_package.vf_env"])
def test_unknown_environment_is_named(tiny_model_dir, env_id: str) -> None:
    with pytest.raises(RolloutError, match=env_id.replace(".", r"\.")):
        make_rollout(tiny_model_dir, "http://127.0.0.1:9", env=env_id).tasks("train")


def test_the_model_folder_and_context_length_come_from_the_context(tiny_model_dir,
                                                                    tmp_path) -> None:
    """A run's context names the model folder: the renderer loads it and the bridge reports
    the context's length, instead of both being recovered from the tokenizer's folder."""
    import shutil

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model, ignore=shutil.ignore_patterns("*.safetensors"))
    rollout = make_rollout(tiny_model_dir, "http://127.0.0.1:9")
    assert rollout.renderer_dir == str(Path(tiny_model_dir).resolve())
    context = rollout.context
    context.model_dir, context.context_length = str(model), 300
    rollout = VerifiersRollout(context)
    assert rollout.renderer_dir == str(model.resolve())
    assert rollout.bridge.max_model_len == 300
