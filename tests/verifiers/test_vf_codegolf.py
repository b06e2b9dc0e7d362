"""The code-golf taskset published for verifiers, run by the ``verifiers`` rollout: real
verifiers episodes and the real code-golf sandbox, with the engine scripted to answer a
known program (the embedded engine runs it in test_vf_train_e2e.py)."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest
from rollyard import (
    GenerateResult,
    RewardContext,
    RolloutContext,
    Sample,
    SampleStatus,
    SamplingParams,
    Task,
)
from rollyard.rewards import RewardSet
from rollyard.testing import ScriptedTransport
from rollyard_codegolf.rewards import CorrectReward
from rollyard_codegolf.tasks import load_tasks
from rollyard_verifiers.rollout import VerifiersRollout

ENV_ID = "rollyard_codegolf.verifiers_env"
pytestmark = pytest.mark.slow


def answer(model_dir: Path, reply: str) -> tuple[list[Sample], Task]:
    """Two episodes of the ``add-two`` problem whose replies are ``reply``."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    ids = [*tokenizer.encode(reply, add_special_tokens=False), tokenizer.eos_token_id]
    transport = ScriptedTransport([GenerateResult(ids, [-0.5] * len(ids), "stop", 4)])
    rollout = VerifiersRollout(RolloutContext(
        config={}, tokenizer=tokenizer, transport=transport, rewards=RewardSet({}, {}),
        options={"env": ENV_ID, "max_turns": 1}, rng=random.Random(0),
        sampling=SamplingParams(max_new_tokens=64)))
    [task] = [t for t in rollout.tasks("train") if t.id == "add-two"]
    assert task.data["codegolf"]["id"] == "add-two"  # the environment's task data
    samples = asyncio.run(rollout.run_group(task, 2))
    assert len(transport.requests) == 2
    return samples, task


def test_a_correct_program_is_scored_by_the_sandbox(tiny_model_dir) -> None:
    program = "print(sum(map(int,input().split())))"
    samples, task = answer(tiny_model_dir, f"```python\n{program}\n```")
    for sample in samples:
        sample.validate()
        assert sample.status == SampleStatus.COMPLETED
        assert sample.rewards["correct"] == 1.0
        [problem] = [t for t in load_tasks() if t.id == "add-two"]
        reference = problem.reference_len
        assert sample.rewards["concise"] == pytest.approx(min(1.0, reference / len(program)))
        assert sample.reward == pytest.approx(1.0 + 0.5 * sample.rewards["concise"])
        assert sample.weight_version == 4
    # rollyard's own code-golf reward reads the same task data and reply
    context = RewardContext(tokenizer=None, options={})
    assert asyncio.run(CorrectReward(context).score_group(samples, task)) == [1.0, 1.0]


def test_a_wrong_program_scores_zero(tiny_model_dir) -> None:
    samples, _ = answer(tiny_model_dir, "```python\nprint(42)\n```")
    assert [s.rewards for s in samples] == [{"correct": 0.0, "concise": 0.0}] * 2
    assert all(s.status == SampleStatus.COMPLETED for s in samples)


def test_eval_split_is_the_held_out_problems(tiny_model_dir) -> None:
    from transformers import AutoTokenizer

    rollout = VerifiersRollout(RolloutContext(
        config={}, tokenizer=AutoTokenizer.from_pretrained(str(tiny_model_dir)),
        transport=ScriptedTransport([RuntimeError("unused")]), rewards=RewardSet({}, {}),
        options={"env": ENV_ID, "eval_config": '{"taskset": {"split": "eval"}}'},
        rng=random.Random(0)))
    train = {t.id for t in rollout.tasks("train")}
    held_out = {t.id for t in rollout.tasks("eval")}
    assert train and held_out and not train & held_out
