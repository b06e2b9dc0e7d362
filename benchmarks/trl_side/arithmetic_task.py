"""The arithmetic word problems of ``rollyard train --rollout-plugin arithmetic``, restated
without rollyard.

Pure standard library: the plugin module imports rollyard (and with it Ray and the trainer's
dependencies), which the TRL venv does not have. Every definition mirrors
plugins/rollyard_plugins/arithmetic.py; the driver checks the copy against the plugin itself
(every problem of both splits) and against what a real rollyard run wrote (task of each step,
reward of each sample), so a change on the rollyard side shows up as a failed check.
"""

from __future__ import annotations

import random
import re

from toy_task import TaskCycle

# plugins/rollyard_plugins/arithmetic.py
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
INTEGER = re.compile(r"-?\d+")
#: ArithmeticOptions defaults
DEFAULT_NUM_TASKS, DEFAULT_EVAL_TASKS = 5000, 100


def _problem(rng: random.Random, high: int) -> tuple[tuple[int, int, int], str, int]:
    story = rng.randrange(len(STORIES))
    a, b = rng.randint(2, high), rng.randint(2, high)
    text, operation = STORIES[story]
    if operation == "-" and b > a:
        a, b = b, a
    answer = a + b if operation == "+" else a - b
    return (story, a, b), text.format(a=a, b=b, name=rng.choice(NAMES)), answer


def make_splits(num_train: int, num_eval: int, high: int, seed: int) -> dict[str, list[dict]]:
    """arithmetic.make_splits: tasks as dicts with id, prompt (chat messages) and answer."""
    rng = random.Random(f"arithmetic-{seed}")
    held_out: dict[tuple[int, int, int], tuple[str, int]] = {}
    while len(held_out) < num_eval:
        key, question, answer = _problem(rng, high)
        held_out.setdefault(key, (question, answer))
    train: list[tuple[str, int]] = []
    while len(train) < num_train:
        key, question, answer = _problem(rng, high)
        if key not in held_out:
            train.append((question, answer))

    def tasks(split: str, problems: list[tuple[str, int]]) -> list[dict]:
        return [{"id": f"{split}-{i:05d}",
                 "prompt": [{"role": "user", "content": f"{question} {INSTRUCTION}"}],
                 "answer": str(answer)}
                for i, (question, answer) in enumerate(problems)]

    return {"train": tasks("train", train), "eval": tasks("eval", list(held_out.values()))}


def task_stream(splits: dict[str, list[dict]], seed: int, groups_per_step: int,
                steps: int) -> list[list[dict]]:
    """The training tasks of each step, in the order rollyard draws them (its TaskCycle)."""
    cycle = TaskCycle(splits["train"], seed)
    return [cycle.take(groups_per_step) for _ in range(steps)]


def final_integer(text: str) -> str | None:
    found = INTEGER.findall(text)
    return found[-1] if found else None


def answer_reward(completion: str, answer: str) -> float:
    """ArithAnswer: 1.0 when the reply's last integer is the answer (also what eval counts)."""
    return float(final_integer(completion) == answer)


def format_reward(completion: str, answer: str) -> float:
    """ArithFormat: 1.0 when the reply is one integer and nothing else."""
    return float(INTEGER.fullmatch(completion.strip()) is not None)


# ArithmeticRollout.default_rewards; rollyard's sample reward is the weighted sum
REWARD_WEIGHTS = {"arith-answer": 1.0, "arith-format": 0.5}
REWARD_FUNCTIONS = {"arith-answer": answer_reward, "arith-format": format_reward}
REWARD_MAX = sum(REWARD_WEIGHTS.values())


def total_reward(completion: str, answer: str) -> float:
    return sum(w * REWARD_FUNCTIONS[name](completion, answer)
               for name, w in REWARD_WEIGHTS.items())
