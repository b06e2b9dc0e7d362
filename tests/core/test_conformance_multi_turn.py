"""The conformance check holds multi-turn samples to what the engine produced: loss mask 1
exactly on the engine's tokens, the engine's logprobs, a history the engine saw."""

from __future__ import annotations

import re

import pytest
from broken_multi_turn import PLUGINS
from rollyard.testing import check_plugin

#: Replies as single-byte tokens: the tokenizer would merge them, so a re-tokenised history
#: differs from what the engine sent.
BYTES = [[ord("4") + 188, ord("2") + 188]]


def check(name, tokenizer, replies=("7",)):
    return check_plugin(PLUGINS[name], name=name, tokenizer=tokenizer, replies=list(replies))


def failures(report):
    return "\n".join(f"{r.check}: {r.message}" for r in report.failures)


def test_an_honest_multi_turn_plugin_passes(rollyard_tokenizer):
    report = check("honest", rollyard_tokenizer)
    assert report.ok, report.format()
    assert "(2.0 engine calls per episode)" in report.format()


@pytest.mark.parametrize("name, problem", [
    ("trains-on-the-user", r"sample 0, turn 1 \(environment tokens after the model's reply\), "
                           r"response position 2 \(token \d+\): loss_mask is 1 on a token "
                           "the engine did not generate"),
    ("made-up-logprobs", r"sample 0, turn 1, response position 0 \(token \d+\): logprob is "
                         r"-1.0, the engine's is -0.5"),
    ("no-prompt", "sample 0: prompt_len is 0"),
])
def test_a_plugin_with_wrong_bookkeeping_fails_naming_turn_and_position(
        rollyard_tokenizer, name, problem):
    report = check(name, rollyard_tokenizer)
    assert not report.ok
    assert "engine tokens (train)" in failures(report)
    assert re.search(problem, failures(report)), failures(report)


def test_a_re_tokenised_history_fails_naming_the_session_and_turn(rollyard_tokenizer):
    report = check("retokenises", rollyard_tokenizer, replies=BYTES)
    assert not report.ok
    assert "turn 2: input_ids[" in failures(report)
    assert "send the engine's own output_ids back, not a re-tokenised history" in \
        failures(report)


def test_the_shipped_step_style_game_passes(rollyard_conformance):
    report = rollyard_conformance("guess")
    assert "engine calls per episode" in report.format()


def test_episodes_sharing_a_session_id_are_not_taken_for_a_re_tokenised_history(
        rollyard_tokenizer):
    from rollyard import GenerateRequest, GenerateResult, SamplingParams
    from rollyard.testing.traces import session_problems

    def call(ids, output):
        return (GenerateRequest(ids, SamplingParams(), session_id="task-1"),
                GenerateResult(output, [-0.5] * len(output), "stop"))

    prompt = [1, 5, 6]
    interleaved = [call(prompt, [7, 2]), call(prompt, [8, 2]),  # two episodes, one session
                   call([*prompt, 8, 2, 9], [3, 2]), call([*prompt, 7, 2, 9], [4, 2])]
    assert session_problems(interleaved) == []
    edited = [*interleaved, call([*prompt, 7, 9, 9, 3, 2, 9], [2])]
    [problem] = session_problems(edited)
    assert problem.startswith("session 'task-1', turn 5: input_ids[4] is 9, but the engine's "
                              "reply to turn 1 put 2 there")
