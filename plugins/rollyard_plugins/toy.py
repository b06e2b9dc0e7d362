"""Toy environments for the default run: copy or reverse a short string.

A tiny model trained from scratch improves on these within minutes on a CPU, which makes them
the smoke test of the whole loop (rollouts, rewards, Megatron update, weight sync).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rollyard import Rollout, RolloutContext, Sample, Task, hookimpl
from rollyard.options import option

ALPHABET = "abcde"
EVAL_SHARE = 0.2
OPERATIONS = {"copy": lambda s: s, "reverse": lambda s: s[::-1]}


def distinct_words(min_len: int = 2, max_len: int = 4) -> int:
    """How many different words of these lengths ALPHABET spells."""
    return sum(len(ALPHABET) ** n for n in range(min_len, max_len + 1))


def make_tasks(operation: str, count: int, seed: int, min_len: int = 2,
               max_len: int = 4) -> list[Task]:
    """Deterministic tasks: ``count`` distinct strings over ALPHABET and their answers."""
    if count > distinct_words(min_len, max_len):
        raise ValueError(f"only {distinct_words(min_len, max_len)} distinct words exist")
    rng = random.Random(f"{operation}-{seed}")
    words: dict[str, None] = {}
    while len(words) < count:
        words["".join(rng.choice(ALPHABET) for _ in range(rng.randint(min_len, max_len)))] = None
    return [Task(id=f"{operation}-{i:04d}",
                 prompt=[{"role": "user", "content": f"{operation}: {word}"}],
                 data={"answer": OPERATIONS[operation](word), "word": word})
            for i, word in enumerate(words)]


def _task_count(count: int) -> None:
    if not 2 <= count <= distinct_words():
        raise ValueError(f"choose 2..{distinct_words()} (both splits need a task; there are "
                         "only so many words)")


@dataclass(frozen=True)
class ToyOptions:
    """Options of the toy environments (``--toy-*``)."""

    operation: Literal["copy", "reverse"] = option("copy",
                                                   help="what the model must do to the word")
    num_tasks: int = option(200, check=_task_count, help="distinct words")


class StringOperationRollout(Rollout):
    """Single-turn: the model sees ``<operation>: <word>`` and must answer the result.

    Tasks: ``num_tasks`` distinct words drawn with the run's seed; the first 80% are the
    train split, the rest the eval split.
    """

    name = "toy"
    Options = ToyOptions
    default_rewards = {"char-f1": 1.0, "exact-match": 1.0}
    eval_held_out = True  # no eval word is a training word

    def __init__(self, context: RolloutContext) -> None:
        super().__init__(context)
        options: ToyOptions = context.options
        all_tasks = make_tasks(options.operation, options.num_tasks, seed=context.config.seed)
        cut = int(len(all_tasks) * (1 - EVAL_SHARE))
        self._splits = {"train": all_tasks[:cut], "eval": all_tasks[cut:]}

    def tasks(self, split: str) -> Sequence[Task]:
        return self._splits[split]

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        from rollyard.episodes import sample_single_turn

        return await sample_single_turn(self.context, task, n)

    def solved(self, sample: Sample, task: Task) -> bool:
        """Solved means the exact answer, whatever the rewards (char-f1 gives partial
        credit)."""
        return (sample.completion or "").strip() == task.data["answer"]


@hookimpl
def register_rollouts(register):
    register(StringOperationRollout)
