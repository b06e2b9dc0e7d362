"""The ``codegolf`` rollout: plugin registration and options, episode groups through a
scripted transport, and through the embedded engine with a tiny model."""

from __future__ import annotations

import argparse
import asyncio
import random

import pytest
from rollyard import (
    ConfigError,
    GenerateRequest,
    GenerateResult,
    RewardContext,
    RolloutContext,
    SampleStatus,
    SamplingParams,
    Transport,
)
from rollyard.options import plugin_options
from rollyard.plugins import PluginManager
from rollyard.rewards import RewardSet
from rollyard_codegolf.rewards import REWARDS
from rollyard_codegolf.rollout import CodegolfRollout
from rollyard_codegolf.scoring import REASONS


class ScriptedTransport(Transport):
    """Stands in for the engine: episode i of every group answers ``replies[i]``."""

    name = "scripted"

    def __init__(self, tokenizer, replies: list[str]) -> None:
        super().__init__(["http://engine.invalid"])
        self.tokenizer, self.replies = tokenizer, replies

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        index = int(request.session_id.rsplit("/", 1)[1])
        ids = self.tokenizer.encode(self.replies[index], add_special_tokens=False)
        ids.append(self.tokenizer.eos_token_id)
        return GenerateResult(output_ids=ids, logprobs=[-0.1] * len(ids), finish_reason="stop")


def reward_set(options: dict) -> RewardSet:
    context = RewardContext(tokenizer=None, options=options)
    return RewardSet({cls.name: cls(context) for cls in REWARDS},
                     CodegolfRollout.default_rewards)


def make_rollout(tokenizer, transport, options: dict | None = None,
                 max_new_tokens: int = 96) -> CodegolfRollout:
    options = {"timeout": 2.0, **(options or {})}
    return CodegolfRollout(RolloutContext(
        config={"seed": 0}, tokenizer=tokenizer, transport=transport,
        rewards=reward_set(options), options=options, rng=random.Random(0),
        sampling=SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, seed=0)))


def test_entry_point_registers_rollout_rewards_and_command():
    manager = PluginManager(environ={"ROLLYARD_LOAD_PLUGINS": "codegolf"})
    manager.load_all()
    assert manager.records["codegolf"].errors == []
    assert manager.get("rollout", "codegolf") is CodegolfRollout
    assert set(CodegolfRollout.default_rewards) == set(manager.names("reward"))
    assert manager.names("command") == ["codegolf"]


def test_add_options_reach_the_rollout_and_override_reward_weights(tokenizer):
    manager = PluginManager(environ={"ROLLYARD_LOAD_PLUGINS": "codegolf"})
    manager.load_all()
    parser = argparse.ArgumentParser()
    manager.hooks.add_options(parser)
    args = parser.parse_args(["--codegolf-weight-fast", "0.5", "--codegolf-timeout", "1.5",
                              "--codegolf-correct", "all"])
    options = plugin_options(args, "codegolf")
    assert options["timeout"] == 1.5 and options["correct"] == "all"
    rollout = make_rollout(tokenizer, ScriptedTransport(tokenizer, []), options)
    assert rollout.settings.limits.wall_s == 1.5
    assert CodegolfRollout.reward_weights(options) == {
        "codegolf.correct": 1.0, "codegolf.concise": 0.2, "codegolf.fast": 0.5}
    assert len(rollout.tasks("train")) + len(rollout.tasks("eval")) >= 60


def test_bad_options_name_the_flag(tokenizer):
    with pytest.raises(ConfigError, match="--codegolf-extract 'first'"):
        make_rollout(tokenizer, None, {"extract": "first"})
    with pytest.raises(ConfigError, match="--codegolf-tasks"):
        make_rollout(tokenizer, None, {"tasks": "/nonexistent/tasks.json"})


def test_rollout_refuses_to_start_without_a_sandbox(tokenizer, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on the PATH
    # a timeout no other test uses, so no runner built earlier in this process is reused
    with pytest.raises(ConfigError, match="--codegolf-unsafe-no-sandbox"):
        make_rollout(tokenizer, None, {"timeout": 1.25})


def test_run_group_scores_programs_in_the_sandbox(tokenizer):
    replies = ["```python\nprint(input()[::-1])\n```", "I would rather not.",
               "```python\nprint('olleh')\n```", "```python\nwhile 1:pass\n```"]
    rollout = make_rollout(tokenizer, ScriptedTransport(tokenizer, replies))
    task = next(t for t in [*rollout.tasks("train"), *rollout.tasks("eval")]
                if t.id == "reverse-line")
    samples = asyncio.run(rollout.run_group(task, 4))
    asyncio.run(rollout.context.rewards.score_group(samples, task))
    for s in samples:
        s.validate()
        assert s.status is SampleStatus.COMPLETED and s.task_id == "reverse-line"
    reasons = [s.metadata["codegolf"]["reason"] for s in samples]
    assert reasons[:3] == [None, "no_code", "wrong_answer"]
    assert reasons[3] in ("timeout", "cpu_limit") and set(reasons) <= {None, *REASONS}
    assert [s.rewards["codegolf.correct"] for s in samples] == [1.0, 0.0, 0.0, 0.0]
    assert samples[0].reward > 1.0 and [s.reward for s in samples[1:]] == [0.0] * 3
    metrics = rollout.metrics()
    assert metrics["codegolf/passed"] == 0.25 and metrics["codegolf/no_code"] == 0.25
    assert metrics["codegolf/passing_length"] == len("print(input()[::-1])")
    assert rollout.metrics() == {}


@pytest.mark.slow
def test_run_group_through_the_embedded_engine(tiny_model_dir, embedded_engine):
    from rollyard_plugins.sglang_transport import SGLangTransport
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    transport = SGLangTransport([embedded_engine.url])
    rollout = make_rollout(tokenizer, transport, max_new_tokens=24)
    task = rollout.tasks("train")[0]

    async def episode():
        try:
            samples = await rollout.run_group(task, 3)
            await rollout.context.rewards.score_group(samples, task)
            return samples
        finally:
            await transport.close()

    samples = asyncio.run(episode())
    assert len(samples) == 3
    for s in samples:
        s.validate()
        assert s.usable and 0 < s.response_len <= 24
        record = s.metadata["codegolf"]
        assert set(s.rewards) == set(CodegolfRollout.default_rewards)
        # a random tiny model: whatever it wrote was scored, and a zero says why
        assert record["reason"] is not None or s.rewards["codegolf.correct"] > 0
    assert sum(rollout.metrics().values()) == pytest.approx(1.0)
