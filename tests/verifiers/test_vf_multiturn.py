"""A real multi-turn episode: verifiers' ``user_sim`` environment, where a modeled user (an
untrainable agent) talks with the assistant. The engine is scripted to answer every turn with
one short, properly ended reply, so verifiers' renderer extends the assistant's token stream
turn by turn and the user's messages sit inside it."""

from __future__ import annotations

import asyncio
import random

import pytest
from rollyard import GenerateResult, RolloutContext, SampleStatus, SamplingParams
from rollyard.rewards import RewardSet
from rollyard.testing import ScriptedTransport
from rollyard_verifiers.rollout import VerifiersRollout

pytestmark = pytest.mark.slow


def test_user_turns_are_masked_and_the_user_agent_is_not_trained(tiny_model_dir,
                                                                test_envs) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    reply = [*tokenizer.encode("It is 5.", add_special_tokens=False), tokenizer.eos_token_id]
    transport = ScriptedTransport([GenerateResult(reply, [-0.5] * len(reply), "stop", 1)])
    rollout = VerifiersRollout(RolloutContext(
        config={}, tokenizer=tokenizer, transport=transport, rewards=RewardSet({}, {}),
        options={"env": "rollyard_vf_arith",
                 "env_config": '{"id": "user_sim", "user": {"max_turns": 2}}'},
        rng=random.Random(0), sampling=SamplingParams(max_new_tokens=16)))
    task = rollout.tasks("train")[0]
    samples = asyncio.run(rollout.run_group(task, 2))
    # per episode the user speaks twice (its turn limit) and the assistant answers twice;
    # both agents' traces reach the engine, only the assistant's become samples
    assert len(transport.requests) == 2 * (2 + 2)
    assert len({r.session_id for r in transport.requests}) == 4
    assert len(samples) == 2
    for sample in samples:
        sample.validate()
        assert sample.status == SampleStatus.COMPLETED
        assert sample.metadata["num_turns"] == 2
        mask = sample.loss_mask
        # one token stream: the assistant's two replies are trained on, the user's message
        # between them (and its chat-template tokens) is not
        assert mask[:len(reply)] == [1] * len(reply)
        assert mask[-len(reply):] == [1] * len(reply)
        assert sum(mask) == 2 * len(reply)
        runs = [m for i, m in enumerate(mask) if i == 0 or m != mask[i - 1]]
        assert runs == [1, 0, 1]
        assert sample.response_ids[-len(reply):] == reply
        assert sample.logprobs == [-0.5 if m else 0.0 for m in mask]
        assert set(sample.rewards) == {"correct", "brief"}
    assert rollout.metrics()["verifiers/num_turns_mean"] == 2.0
