"""``--codegolf-attempts K``: a failing program's first failing test case goes back to the
model, which may answer again, up to K programs; the rewards score the last one."""

from __future__ import annotations

import asyncio

from rollyard import SampleStatus
from rollyard.testing import ScriptedTransport
from rollyard.testing.traces import sample_problem, session_problems
from rollyard_codegolf.feedback import first_failure
from rollyard_codegolf.options import CodegolfOptions
from test_codegolf_rollout import make_rollout, reward_set

OPTIONS = CodegolfOptions(timeout=2.0, attempts=3, extract="whole")
WRONG, RIGHT = "print(input())", "print(input()[::-1])"


def test_first_failure_shows_the_case_and_what_the_program_printed(tasks, sandbox):
    task = tasks["reverse-line"]
    failed = first_failure(WRONG, task, sandbox)
    assert (failed.stdin, failed.expected, failed.reason, failed.got) == (
        "hello\n", "olleh\n", "wrong_answer", "hello")
    assert "on input:\n```\nhello\n```\nexpected:\n```\nolleh\n```" in failed.message()
    crash = first_failure("print(1/0)", task, sandbox)
    assert (crash.reason, crash.got) == ("runtime_error",
                                         "ZeroDivisionError: division by zero")
    assert first_failure(RIGHT, task, sandbox) is None
    assert first_failure(None, task, sandbox).reason == "no_code"


def test_a_failing_program_is_shown_its_failure_and_the_last_program_is_scored(
        tasks, tokenizer):
    transport = ScriptedTransport([WRONG, RIGHT, WRONG], tokenizer=tokenizer, per_session=True)
    rollout = make_rollout(tokenizer, transport, OPTIONS)
    task = tasks["reverse-line"].to_task()

    async def group():
        samples = await rollout.run_group(task, 2)
        await reward_set(OPTIONS).score_group(samples, task)
        return samples

    samples = asyncio.run(group())
    assert len(transport.requests) == 4  # two attempts each: the second program passes
    second = tokenizer.decode(transport.requests[-1].input_ids)
    assert "Failed (wrong_answer) on input:" in second and "olleh" in second
    assert session_problems(transport.calls) == []
    for i, sample in enumerate(samples):
        assert sample.status is SampleStatus.COMPLETED
        assert sample_problem(i, sample, transport.calls) is None  # mask 0 on the feedback
        assert sample.metadata["completion"] == RIGHT and sample.metadata["attempts"] == 2
        assert sample.rewards["codegolf.correct"] == 1.0


def test_attempts_stop_at_k(tasks, tokenizer):
    transport = ScriptedTransport([WRONG], tokenizer=tokenizer, per_session=True)
    options = CodegolfOptions(timeout=2.0, attempts=2, extract="whole")
    rollout = make_rollout(tokenizer, transport, options)
    [sample] = asyncio.run(rollout.run_group(tasks["reverse-line"].to_task(), 1))
    assert sample.metadata["attempts"] == 2 and len(transport.requests) == 2
