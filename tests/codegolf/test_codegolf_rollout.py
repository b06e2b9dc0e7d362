"""The ``codegolf`` rollout: plugin registration, its typed options, and episode groups that
only generate (through a scripted engine, and through the embedded engine with a tiny model)
and are then scored by the core's reward set."""

from __future__ import annotations

import asyncio
import dataclasses
import random

import pytest
from rollyard import ConfigError, RewardContext, RolloutContext, SampleStatus, SamplingParams
from rollyard.options import build_options, option_specs
from rollyard.plugins import PluginManager
from rollyard.rewards import RewardSet
from rollyard.testing import ScriptedTransport
from rollyard_codegolf.options import CodegolfOptions
from rollyard_codegolf.parsing import EXTRACT_MODES
from rollyard_codegolf.rewards import REWARDS
from rollyard_codegolf.rollout import CodegolfRollout
from rollyard_codegolf.scoring import REASONS

OPTIONS = CodegolfOptions(timeout=2.0)
#: Every flag of the plugin, with its default; the same names as before typed options.
FLAGS = {"--codegolf-tasks": None, "--codegolf-extract": "last_block",
         "--codegolf-correct": "fraction", "--codegolf-attempts": 1, "--codegolf-workers": 2,
         "--codegolf-timeout": 4.0,
         "--codegolf-cpu": 2, "--codegolf-memory-mb": 256, "--codegolf-output-kb": 64,
         "--codegolf-python": None, "--codegolf-unsafe-no-sandbox": False,
         "--codegolf-weight-correct": 1.0, "--codegolf-weight-concise": 0.2,
         "--codegolf-weight-fast": 0.0}


def scripted(tokenizer, replies: list[str]) -> ScriptedTransport:
    """Episode i of every group answers ``replies[i]`` (then the end-of-sequence token)."""

    def answer(request) -> list[int]:
        text = replies[int(request.session_id.rsplit("/", 1)[1])]
        return [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]

    return ScriptedTransport([answer], tokenizer=tokenizer)


def make_rollout(tokenizer, transport, options: CodegolfOptions = OPTIONS,
                 max_new_tokens: int = 96) -> CodegolfRollout:
    return CodegolfRollout(RolloutContext(
        config={"seed": 0}, tokenizer=tokenizer, transport=transport, options=options,
        rng=random.Random(0),
        sampling=SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, seed=0)))


def reward_set(options: CodegolfOptions = OPTIONS) -> RewardSet:
    context = RewardContext(tokenizer=None, options=options)
    return RewardSet({cls.name: cls(context) for cls in REWARDS},
                     CodegolfRollout.reward_weights(options))


def test_entry_point_registers_rollout_rewards_and_command():
    manager = PluginManager(environ={"ROLLYARD_LOAD_PLUGINS": "codegolf"})
    manager.load_all()
    assert manager.records["codegolf"].errors == []
    assert manager.get("rollout", "codegolf") is CodegolfRollout
    assert set(CodegolfRollout.default_rewards) == set(manager.names("reward"))
    assert manager.names("command") == ["codegolf"]


def test_one_options_class_declares_every_flag_for_the_rollout_and_rewards():
    for cls in (CodegolfRollout, *REWARDS):
        assert cls.Options is CodegolfOptions and cls.options_prefix == "codegolf"
    specs = option_specs(CodegolfOptions, "codegolf")
    assert {spec.flag: spec.default for spec in specs} == FLAGS
    assert all(spec.help for spec in specs)
    assert {spec.name: spec.choices for spec in specs if spec.choices} == {
        "extract": EXTRACT_MODES, "correct": ("fraction", "all")}
    assert CodegolfRollout.default_rewards == {
        "codegolf.correct": 1.0, "codegolf.concise": 0.2, "codegolf.fast": 0.0}


def test_typed_options_reach_the_rollout_and_override_reward_weights(tokenizer):
    options = build_options(CodegolfOptions, "codegolf",
                            {"weight_fast": 0.5, "timeout": 1.5, "correct": "all"}, "run.toml")
    assert options.limits.wall_s == 1.5 and options.correct == "all"
    rollout = make_rollout(tokenizer, scripted(tokenizer, []), options)
    assert rollout.options is options
    assert CodegolfRollout.reward_weights(options) == {
        "codegolf.correct": 1.0, "codegolf.concise": 0.2, "codegolf.fast": 0.5}
    assert len(rollout.tasks("train")) + len(rollout.tasks("eval")) >= 60


def test_bad_options_name_the_option(tokenizer):
    with pytest.raises(ConfigError, match=r"--codegolf-extract.*'first'"):
        CodegolfOptions.of({"extract": "first"})
    with pytest.raises(ConfigError, match=r"run.toml.*\[codegolf\] 'workers'.*at least 1"):
        build_options(CodegolfOptions, "codegolf", {"workers": 0}, "run.toml")
    with pytest.raises(ConfigError, match="--codegolf-tasks"):
        make_rollout(tokenizer, None, dataclasses.replace(OPTIONS,
                                                          tasks="/nonexistent/tasks.json"))


def test_the_rollout_only_generates(tokenizer, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap: the rollout never needs it
    rollout = make_rollout(tokenizer, scripted(tokenizer, ["```python\nprint(1)\n```"]))
    task = rollout.tasks("train")[0]
    [sample] = asyncio.run(rollout.run_group(task, 1))
    assert sample.metadata == {"completion": "```python\nprint(1)\n```"}
    assert sample.rewards == {} and rollout.metrics() == {}


def test_groups_are_generated_then_scored_once_by_the_reward_set(tokenizer, sandbox_runs):
    programs = ["print(input()[::-1])", None, "print('olleh')", "while 1:pass"]
    replies = [f"```python\n{p}\n```" if p else "I would rather not." for p in programs]
    rollout = make_rollout(tokenizer, scripted(tokenizer, replies))
    rewards = reward_set()
    task = next(t for t in [*rollout.tasks("train"), *rollout.tasks("eval")]
                if t.id == "reverse-line")
    samples = asyncio.run(rollout.run_group(task, 4))
    assert not sandbox_runs  # generating runs nothing
    asyncio.run(rewards.score_group(samples, task))
    hidden = len(task.data["codegolf"]["tests"]) - 1
    assert sandbox_runs["print(input()[::-1])"] == sandbox_runs["print('olleh')"] == hidden
    assert sandbox_runs["while 1:pass"] == 1  # out of time: the other tests are not run
    for s in samples:
        s.validate()
        assert s.status is SampleStatus.COMPLETED and s.task_id == "reverse-line"
    reasons = [s.metadata["codegolf"]["reason"] for s in samples]
    assert reasons[:3] == [None, "no_code", "wrong_answer"]
    assert reasons[3] in ("timeout", "cpu_limit") and set(reasons) <= {None, *REASONS}
    assert [s.rewards["codegolf.correct"] for s in samples] == [1.0, 0.0, 0.0, 0.0]
    assert samples[0].reward > 1.0 and [s.reward for s in samples[1:]] == [0.0] * 3
    metrics = rewards.metrics()
    assert metrics["codegolf/passed"] == 0.25 and metrics["codegolf/no_code"] == 0.25
    assert metrics["codegolf/passing_length"] == len("print(input()[::-1])")
    assert rewards.metrics() == {}
    asyncio.run(rewards.close())


@pytest.mark.slow
def test_run_group_through_the_embedded_engine(tiny_model_dir, embedded_engine):
    from rollyard_plugins.sglang_transport import SGLangTransport
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    transport = SGLangTransport([embedded_engine.url])
    rollout = make_rollout(tokenizer, transport, max_new_tokens=24)
    rewards = reward_set()
    task = rollout.tasks("train")[0]

    async def episode():
        try:
            samples = await rollout.run_group(task, 3)
            await rewards.score_group(samples, task)
            return samples
        finally:
            await transport.close()
            await rewards.close()

    samples = asyncio.run(episode())
    assert len(samples) == 3
    for s in samples:
        s.validate()
        assert s.usable and 0 < s.response_len <= 24
        record = s.metadata["codegolf"]
        assert set(s.rewards) == set(CodegolfRollout.default_rewards)
        # a random tiny model: whatever it wrote was scored, and a zero says why
        assert record["reason"] is not None or s.rewards["codegolf.correct"] > 0
    shares = {k: v for k, v in rewards.metrics().items() if k != "codegolf/passing_length"}
    assert sum(shares.values()) == pytest.approx(1.0)


def test_the_plugin_passes_rollyards_conformance_check():
    from rollyard.testing import check_plugin

    report = check_plugin("codegolf", replies=["```python\nprint(input())\n```"])
    assert report.ok, report.format()
