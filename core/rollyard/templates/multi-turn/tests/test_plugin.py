"""The plugin's tests. The fixtures come with rollyard (its pytest plugin):
``rollyard_conformance``, ``rollyard_manager``, ``rollyard_tokenizer``, ``scripted_transport``.
"""

import asyncio
import random

import pytest
from rollyard import ConfigError, RolloutContext, SampleStatus

from rollyard_myenv import plugin
from rollyard_myenv.env import GuessNumber, MyenvOptions, make_tasks


def test_plugin_keeps_the_rollyard_contract(rollyard_conformance):
    """Registration, options, tasks, multi-turn samples checked against the engine's tokens,
    and engine faults, as a run sees them."""
    rollyard_conformance(plugin, name="myenv")


def test_registers_the_rollout(rollyard_manager):
    record = rollyard_manager.register(plugin, name="myenv")
    assert record.errors == []
    assert rollyard_manager.get("rollout", "myenv") is GuessNumber


def build(transport, tokenizer, **options):
    return GuessNumber(RolloutContext(config={"seed": 0}, tokenizer=tokenizer,
                                      transport=transport, options=options,
                                      rng=random.Random(0)))


def test_hints_lead_to_the_secret(rollyard_tokenizer, scripted_transport):
    task = make_tasks(MyenvOptions())[6]  # secret 7
    # each episode (session) plays the script from its start: 3, then 9, then 7
    transport = scripted_transport(["3", "9", "7"], tokenizer=rollyard_tokenizer,
                                   per_session=True)
    samples = asyncio.run(build(transport, rollyard_tokenizer).run_group(task, 2))
    assert [s.status for s in samples] == [SampleStatus.COMPLETED] * 2
    assert [s.reward for s in samples] == [1.0, 1.0]
    assert samples[0].metadata["replies"] == ["3", "9", "7"]
    seen = rollyard_tokenizer.decode(transport.requests[-1].input_ids)
    assert "higher" in seen and "lower" in seen


def test_running_out_of_turns_is_truncated(rollyard_tokenizer, scripted_transport):
    task = make_tasks(MyenvOptions())[6]
    transport = scripted_transport(["1"], tokenizer=rollyard_tokenizer)
    [sample] = asyncio.run(build(transport, rollyard_tokenizer, turns=2).run_group(task, 1))
    assert (sample.status, sample.reward, sample.metadata["turns"]) == (
        SampleStatus.TRUNCATED, 0.0, 2)


def test_options_are_checked():
    with pytest.raises(ConfigError, match="--myenv-turns"):
        build(None, None, turns=0)
