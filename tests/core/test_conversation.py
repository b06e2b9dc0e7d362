"""Multi-turn episodes through ``rollyard.episodes``: the Conversation's tokens are exactly the
chat template's, the model's tokens alone are trained on, and bad episodes become samples
that say which turn failed."""

from __future__ import annotations

import asyncio
import copy
import random

import pytest
from rollyard import EngineAborted, RolloutContext, SampleStatus, Task, TransportError
from rollyard.episodes import (
    Conversation,
    TextEnv,
    sample_multi_turn,
    sample_single_turn,
)
from rollyard.errors import RolloutError
from rollyard.seeding import seeded_group
from rollyard.testing import ScriptedTransport
from rollyard.types import SamplingParams

TASK = Task(id="guess-3", prompt=[{"role": "user", "content": "Guess 1..4"}],
            data={"secret": 3})


def context(tokenizer, transport, **fields):
    return RolloutContext({"seed": 0}, tokenizer, transport, None, {}, random.Random(0),
                          **fields)


def template_ids(tokenizer, messages, **kwargs):
    text = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    return tokenizer.encode(text, add_special_tokens=False)


async def two_turns(conv: Conversation):
    first = await conv.generate()
    assert conv.add_message("user", "higher" if first.text == "1" else "?")
    await conv.generate()
    return conv.sample()


def test_tokens_are_the_chat_templates_and_only_the_model_is_trained(rollyard_tokenizer):
    tok = rollyard_tokenizer
    transport = ScriptedTransport(["1", "3"], tokenizer=tok, per_session=True,
                                  logprob=lambda i: -0.1 * (i + 1))
    [sample] = asyncio.run(sample_multi_turn(context(tok, transport), TASK, 1, two_turns))
    full = template_ids(tok, [*TASK.prompt, {"role": "assistant", "content": "1"},
                              {"role": "user", "content": "higher"},
                              {"role": "assistant", "content": "3"}])
    newline = tok.encode("\n", add_special_tokens=False)
    assert sample.tokens + newline == full  # the template ends the last turn with "\n"
    (first, r1), (second, r2) = transport.calls
    assert sample.prompt_len == len(first.input_ids)
    # the second request continues the first one's tokens and the engine's reply exactly
    assert second.input_ids[:len(first.input_ids) + len(r1.output_ids)] == \
        first.input_ids + r1.output_ids
    env = len(second.input_ids) - len(first.input_ids) - len(r1.output_ids)
    assert sample.loss_mask == [1] * len(r1.output_ids) + [0] * env + [1] * len(r2.output_ids)
    assert sample.logprobs == r1.logprobs + [0.0] * env + r2.logprobs
    assert sample.status is SampleStatus.COMPLETED and sample.metadata["turns"] == 2
    assert sample.metadata["completion"] == "3" and sample.metadata["replies"] == ["1", "3"]
    sample.validate()


def test_turns_share_the_single_turn_seed_session_and_stop_ids(rollyard_tokenizer):
    transport = ScriptedTransport(["1", "3"], tokenizer=rollyard_tokenizer, per_session=True)
    ctx = context(rollyard_tokenizer, transport,
                  sampling=SamplingParams(max_new_tokens=5, stop_token_ids=[7]))

    async def both():
        with seeded_group(1234):
            multi = await sample_multi_turn(ctx, TASK, 2, two_turns)
            single = await sample_single_turn(ctx, TASK, 2)
        return multi, single

    multi, single = asyncio.run(both())
    assert multi[0].group_id == single[0].group_id  # the group seed names both groups
    requests = transport.requests
    by_session = {}
    for request in requests[:4]:
        by_session.setdefault(request.session_id, []).append(request)
    assert sorted(by_session) == [f"{multi[0].group_id}/0", f"{multi[0].group_id}/1"]
    turn_one = {r.session_id: r.sampling.seed for r in requests[4:]}  # single-turn's
    for session, (t1, t2) in by_session.items():
        assert t1.sampling.seed == turn_one[session] != t2.sampling.seed
        assert t1.sampling.stop_token_ids == [7, rollyard_tokenizer.eos_token_id]
        assert t1.sampling.max_new_tokens == 5


def test_a_reply_that_exhausts_the_context_ends_the_episode_truncated(rollyard_tokenizer):
    tok = rollyard_tokenizer
    prompt_len = len(template_ids(tok, TASK.prompt, add_generation_prompt=True))
    transport = ScriptedTransport(["1 2 3 4 1 2 3 4 1 2 3 4"], tokenizer=tok, per_session=True)
    ctx = context(tok, transport, context_length=prompt_len + 6,
                  sampling=SamplingParams(max_new_tokens=64))

    async def play(conv):
        turn = await conv.generate()
        assert (turn.finish_reason, conv.room, conv.truncated) == ("length", 0, True)
        assert not conv.add_message("user", "lower")  # no room: nothing appended
        again = await conv.generate()  # the engine is not asked again
        assert (again.text, again.finish_reason) == ("", "length")
        return conv.sample()

    [sample] = asyncio.run(sample_multi_turn(ctx, TASK, 1, play))
    assert [r.sampling.max_new_tokens for r in transport.requests] == [6]
    assert sample.status is SampleStatus.TRUNCATED and len(sample.tokens) == prompt_len + 6


def test_a_role_the_chat_template_refuses_is_a_clear_error(rollyard_tokenizer):
    strict = copy.deepcopy(rollyard_tokenizer)
    strict.chat_template = (
        "{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
        "{{ raise_exception('unknown role ' + m['role']) }}{% endif %}"
        "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
    transport = ScriptedTransport(["1"], tokenizer=strict)

    async def play(conv):
        await conv.generate()
        conv.add_message("oracle", "it is 3")

    [sample] = asyncio.run(sample_multi_turn(context(strict, transport), TASK, 1, play))
    assert sample.status is SampleStatus.FAILED
    failure = sample.metadata["failure"]
    assert "episode 0, turn 1: ValueError" in failure
    assert "cannot render a message with role ['oracle']" in failure
    assert "unknown role oracle" in failure


def test_a_conversation_that_never_generates_is_a_clear_error(rollyard_tokenizer):
    conv = Conversation(context(rollyard_tokenizer, ScriptedTransport()), TASK, 0)
    conv.add_message("user", "hello")
    with pytest.raises(RolloutError, match=r"task 'guess-3', episode 0: the conversation has "
                                           r"no tokens from the model .* call `await "
                                           r"conv.generate\(\)`"):
        conv.sample()


def test_engine_failures_name_the_turn_and_the_other_episodes_go_on(rollyard_tokenizer):
    def script(request):
        episode = request.session_id.rsplit("/", 1)[1]
        if episode == "1" and len(request.input_ids) > 20:
            raise EngineAborted("engine restarted")
        if episode == "2":
            raise TransportError("connection refused")
        return "1"

    transport = ScriptedTransport([script], tokenizer=rollyard_tokenizer)
    ok, aborted, failed = asyncio.run(sample_multi_turn(
        context(rollyard_tokenizer, transport), TASK, 3, two_turns))
    assert ok.status is SampleStatus.COMPLETED
    assert aborted.status is SampleStatus.ABORTED
    assert aborted.metadata["failure"] == "turn 2: engine restarted"
    assert failed.status is SampleStatus.FAILED
    assert failed.metadata["failure"].startswith("turn 1: connection refused")


class Guess(TextEnv):
    """Guess 1..4; a guess of 4 makes ``step`` raise, to show a failed episode."""

    name = "guess-test"
    max_turns = 3

    def tasks(self, split):
        return [TASK]

    def reset(self, task):
        self.secret, self.seen = task.data["secret"], []
        return task.prompt

    def step(self, reply):
        self.seen.append(reply)
        if reply == "4":
            raise ValueError("four is not allowed")
        if reply == str(self.secret):
            return [], 1.0, True
        return [{"role": "user", "content": "higher"}], -0.25, False


def test_a_step_style_environment_plays_each_episode_on_its_own(rollyard_tokenizer):
    script = {"0": ["1", "3"], "1": ["1", "2", "2"], "2": ["1", "4"]}

    def reply(request):
        episode = request.session_id.rsplit("/", 1)[1]
        turn = sum(r.session_id == request.session_id for r in transport.requests) - 1
        return script[episode][turn]

    transport = ScriptedTransport([reply], tokenizer=rollyard_tokenizer)
    rollout = Guess(context(rollyard_tokenizer, transport))
    found, out_of_turns, raised = asyncio.run(rollout.run_group(TASK, 3))
    assert (found.status, found.reward, found.rewards) == (SampleStatus.COMPLETED, 0.75,
                                                           {"env": 0.75})
    assert (out_of_turns.status, out_of_turns.reward) == (SampleStatus.TRUNCATED, -0.75)
    assert out_of_turns.metadata["turns"] == 3
    assert raised.status is SampleStatus.FAILED
    assert ("task 'guess-3', episode 2, turn 2: ValueError: four is not allowed"
            in raised.metadata["failure"])
    assert not hasattr(rollout, "seen")  # episodes ran on copies


def test_a_play_that_never_generates_fails_its_episode_with_the_reason(rollyard_tokenizer):
    async def silent(conv):
        return conv.sample()

    [sample] = asyncio.run(sample_multi_turn(
        context(rollyard_tokenizer, ScriptedTransport()), TASK, 1, silent))
    assert sample.status is SampleStatus.FAILED
    assert "the conversation has no tokens from the model" in sample.metadata["failure"]


def test_a_rollout_worker_gives_the_rollout_its_models_context_length_and_folder(
        tmp_path, tiny_model_dir):
    import json
    import shutil

    from rollyard.config import RunConfig
    from rollyard.run.rollout_workers import RolloutSpec, RolloutWorker

    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 300}))
    spec = RolloutSpec(RunConfig(rollout_plugin="guess"), {}, str(model),
                       ["http://127.0.0.1:1"])
    context = RolloutWorker(spec, 0).rollout.context
    assert context.context_length == 300
    assert context.model_dir == str(model)
    assert context.tokenizer.eos_token_id in context.special_token_ids


def test_the_preflight_builds_the_rollout_with_the_models_folder(tiny_model_dir):
    from rollyard.config import RunConfig
    from rollyard.model_facts import model_max_tokens
    from rollyard.run.preflight import count_tasks
    from rollyard_plugins.toy import StringOperationRollout, ToyOptions

    seen = []

    class Records(StringOperationRollout):
        def __init__(self, context):
            super().__init__(context)
            seen.append(context)

    count_tasks(Records, ToyOptions(), RunConfig(), tiny_model_dir, ["train"])
    assert seen[0].model_dir == str(tiny_model_dir)
    assert seen[0].context_length == model_max_tokens(tiny_model_dir)


def test_the_default_context_length_is_the_tiny_models():
    from rollyard.interfaces import DEFAULT_CONTEXT_LENGTH
    from rollyard.models.tiny import SIZES

    assert DEFAULT_CONTEXT_LENGTH == SIZES["tiny"]["max_position_embeddings"]


class GuessWithPenalty(Guess):
    """The same game, with a final reward that costs a quarter per turn taken."""

    def final_reward(self):
        return -0.25 * len(self.seen)


def test_a_final_reward_adds_to_the_step_rewards(rollyard_tokenizer):
    transport = ScriptedTransport(["1", "3"], tokenizer=rollyard_tokenizer, per_session=True)
    rollout = GuessWithPenalty(context(rollyard_tokenizer, transport))
    [sample] = asyncio.run(rollout.run_group(TASK, 1))
    assert sample.reward == -0.25 + 1.0 - 0.5


def test_no_room_to_open_the_next_turn_ends_the_episode_within_the_context(
        rollyard_tokenizer):
    async def play(conv):
        await conv.generate()
        conv.add_message("user", "higher")
        filled = len(conv.tokens)
        await conv.generate()
        return filled

    def run(context_length):
        transport = ScriptedTransport(["1"], tokenizer=rollyard_tokenizer, per_session=True)
        conv = Conversation(context(rollyard_tokenizer, transport,
                                    context_length=context_length), TASK)
        return conv, asyncio.run(play(conv)), transport

    roomy, filled, _ = run(512)
    opening = len(roomy.tokens) - filled - 2  # the reply is "1" and the stop token
    tight, _, transport = run(filled + opening)  # room for the opening, none to reply
    assert tight.truncated and len(tight.tokens) == filled <= tight.context.context_length
    assert len(transport.requests) == 1
    assert tight.sample().status is SampleStatus.TRUNCATED
