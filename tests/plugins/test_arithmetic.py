"""The arithmetic word problems: deterministic held-out splits and the two rewards."""

from __future__ import annotations

import asyncio
import re

import pytest
from rollyard import Sample, Task
from rollyard_plugins.arithmetic import (
    ArithAnswer,
    ArithFormat,
    ArithmeticRollout,
    final_integer,
    make_splits,
)


def test_splits_are_deterministic_and_the_eval_split_is_held_out():
    splits = make_splits(2000, 100, 20, seed=3)
    assert splits == make_splits(2000, 100, 20, seed=3)
    assert splits != make_splits(2000, 100, 20, seed=4)
    assert (len(splits["train"]), len(splits["eval"])) == (2000, 100)
    eval_prompts = {task.prompt[0]["content"] for task in splits["eval"]}
    assert len(eval_prompts) == 100
    # a problem is its story and numbers; names vary, so compare prompts without them
    def problem(task: Task) -> str:
        return re.sub(r"\b(Sam|Ana|Tom|Mia|Leo|Zoe)\b", "N", task.prompt[0]["content"])
    assert not {problem(t) for t in splits["eval"]} & {problem(t) for t in splits["train"]}
    for task in splits["train"][:50] + splits["eval"]:
        a, b = map(int, re.findall(r"\d+", task.prompt[0]["content"])[:2])
        assert int(task.data["answer"]) in (a + b, a - b) and int(task.data["answer"]) >= 0


def test_too_many_eval_tasks_for_the_numbers_is_refused():
    with pytest.raises(ValueError, match="at most"):
        make_splits(10, 1000, 5, seed=0)


@pytest.mark.parametrize("completion, answer, format_", [
    ("7", 1.0, 1.0), (" 7\n", 1.0, 1.0), ("3 + 4 = 7", 1.0, 0.0), ("8", 0.0, 1.0),
    ("Sam has 7 apples.", 1.0, 0.0), ("seven", 0.0, 0.0), ("", 0.0, 0.0), ("17", 0.0, 1.0),
])
def test_rewards(completion, answer, format_):
    task = Task(id="t", prompt="q", data={"answer": "7"})
    sample = Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[0.0],
                    metadata={"completion": completion})
    assert asyncio.run(ArithAnswer().score(sample, task)) == answer
    assert asyncio.run(ArithFormat().score(sample, task)) == format_
    assert ArithmeticRollout.solved(None, sample, task) is bool(answer)
    assert (final_integer(completion) == "7") is bool(answer)
