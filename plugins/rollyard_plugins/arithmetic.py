"""Arithmetic word problems for a real instruct model: small-integer addition and subtraction
told as one-sentence stories, answered through the model's chat template.

A pretrained instruct model of ~100 M parameters solves some of these already and talks around
its answers; within minutes of RL on a CPU it learns to answer more of them, and to answer
with the number alone. Two rewards score a reply: ``arith-answer`` (1 when the last integer in
the reply is the answer: the exact answer, whatever is around it) and ``arith-format`` (1 when
the reply is that integer and nothing else, right or wrong). ``eval/pass@1`` counts the exact
answer only.

The eval split is held out: no (story, numbers) pair of the eval split is a training task,
and the training stream is long enough (``--arithmetic-num-tasks``) that a task seldom
repeats within a run, so the training reward is itself close to a held-out check.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rollyard import Reward, Rollout, RolloutContext, Sample, Task, hookimpl
from rollyard.options import at_least, option

#: (story with {a} and {b}, operation); every answer is a non-negative integer
STORIES: tuple[tuple[str, str], ...] = (
    ("{name} has {a} apples and gets {b} more. How many apples does {name} have now?", "+"),
    ("{name} has {a} apples and gives away {b}. How many apples does {name} have left?", "-"),
    ("There are {a} birds on a tree and {b} more land on it. How many birds are on the "
     "tree now?", "+"),
    ("A box holds {a} pencils. {name} takes {b} out. How many pencils are left in the box?",
     "-"),
    ("{name} read {a} pages on Monday and {b} pages on Tuesday. How many pages did {name} "
     "read in all?", "+"),
    ("A bus has {a} people on it. At the stop, {b} get off. How many people are still on the "
     "bus?", "-"),
)
NAMES = ("Sam", "Ana", "Tom", "Mia", "Leo", "Zoe")
INSTRUCTION = "Answer with the number only."
_INTEGER = re.compile(r"-?\d+")


def _problem(rng: random.Random, high: int) -> tuple[tuple[int, int, int], str, int]:
    story = rng.randrange(len(STORIES))
    a, b = rng.randint(2, high), rng.randint(2, high)
    text, operation = STORIES[story]
    if operation == "-" and b > a:
        a, b = b, a
    answer = a + b if operation == "+" else a - b
    question = text.format(a=a, b=b, name=rng.choice(NAMES))
    return (story, a, b), question, answer


def make_splits(num_train: int, num_eval: int, high: int,
                seed: int) -> dict[str, list[Task]]:
    """Deterministic splits: ``num_eval`` distinct problems, then ``num_train`` training
    problems none of which is an eval problem (training problems may repeat once the distinct
    ones run out)."""
    rng = random.Random(f"arithmetic-{seed}")
    held_out: dict[tuple[int, int, int], tuple[str, int]] = {}
    distinct = len(STORIES) * (high - 1) ** 2
    if num_eval >= distinct // 2:
        raise ValueError(f"--arithmetic-eval-tasks {num_eval}: at most {distinct // 2 - 1} "
                         f"with numbers up to {high}")
    while len(held_out) < num_eval:
        key, question, answer = _problem(rng, high)
        held_out.setdefault(key, (question, answer))
    train: list[tuple[str, int]] = []
    while len(train) < num_train:
        key, question, answer = _problem(rng, high)
        if key not in held_out:
            train.append((question, answer))

    def tasks(split: str, problems: Sequence[tuple[str, int]]) -> list[Task]:
        return [Task(id=f"{split}-{i:05d}",
                     prompt=[{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                     data={"answer": str(answer)})
                for i, (question, answer) in enumerate(problems)]

    return {"train": tasks("train", train), "eval": tasks("eval", list(held_out.values()))}


def final_integer(text: str) -> str | None:
    """The last integer written in ``text`` (None when there is none)."""
    found = _INTEGER.findall(text)
    return found[-1] if found else None


@dataclass(frozen=True)
class ArithmeticOptions:
    """Options of the arithmetic word problems (``--arithmetic-*``)."""

    num_tasks: int = option(5000, check=at_least(1), help="training problems in the stream")
    eval_tasks: int = option(100, check=at_least(1), help="held-out eval problems")
    max_number: int = option(20, check=at_least(3), help="largest number in a problem")


class ArithmeticRollout(Rollout):
    """Single-turn: a chat-templated word problem; the reply ends at the tokenizer's end
    token (``<|im_end|>`` for ChatML models)."""

    name = "arithmetic"
    Options = ArithmeticOptions
    default_rewards = {"arith-answer": 1.0, "arith-format": 0.5}
    eval_held_out = True

    def __init__(self, context: RolloutContext) -> None:
        super().__init__(context)
        options: ArithmeticOptions = context.options
        self._splits = make_splits(options.num_tasks, options.eval_tasks, options.max_number,
                                   seed=context.config.seed)

    def tasks(self, split: str) -> Sequence[Task]:
        return self._splits[split]

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        from rollyard.episodes import sample_single_turn

        return await sample_single_turn(self.context, task, n)

    def solved(self, sample: Sample, task: Task) -> bool:
        """The exact answer is the reply's last integer (format aside)."""
        return final_integer(sample.completion or "") == task.data["answer"]


class ArithAnswer(Reward):
    """1.0 when the last integer of the reply is the answer, else 0.0."""

    name = "arith-answer"

    async def score(self, sample: Sample, task: Task) -> float:
        return float(final_integer(sample.completion or "")
                     == task.data["answer"])


class ArithFormat(Reward):
    """1.0 when the reply is one integer and nothing else (right or wrong), else 0.0."""

    name = "arith-format"

    async def score(self, sample: Sample, task: Task) -> float:
        return float(_INTEGER.fullmatch((sample.completion or "").strip())
                     is not None)


@hookimpl
def register_rollouts(register):
    register(ArithmeticRollout)


@hookimpl
def register_rewards(register):
    register(ArithAnswer)
    register(ArithFormat)
