"""The environment: sort the letters of a word, in one turn."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rollyard import Rollout, RolloutContext, Sample, Task
from rollyard.options import at_least, option

ALPHABET = "abcdefgh"
EVAL_SHARE = 0.2


@dataclass(frozen=True)
class MyenvOptions:
    """The ``--myenv-*`` options (the ``[myenv]`` table of a run.toml), declared once."""

    num_tasks: int = option(200, check=at_least(2),
                            help="distinct words, split 80/20 into train and eval")
    word_length: int = option(4, check=at_least(2), help="letters per word")

    def __post_init__(self) -> None:
        possible = len(ALPHABET) ** self.word_length
        if self.num_tasks > possible:
            raise ValueError(f"--myenv-num-tasks {self.num_tasks} with --myenv-word-length "
                             f"{self.word_length}: choose 2..{possible} tasks")


def make_tasks(options: MyenvOptions, seed: int) -> list[Task]:
    """``options.num_tasks`` distinct words, in an order fixed by ``seed``."""
    rng = random.Random(f"myenv-{seed}")
    words: dict[str, None] = {}
    while len(words) < options.num_tasks:
        words["".join(rng.choice(ALPHABET) for _ in range(options.word_length))] = None
    return [Task(id=f"sort-{word}", prompt=[{"role": "user", "content": f"sort: {word}"}],
                 data={"answer": "".join(sorted(word))}) for word in words]


class SortLetters(Rollout):
    """Single turn: the model sees ``sort: dbca`` and must answer ``abcd``."""

    name = "myenv"
    Options = MyenvOptions
    default_rewards: ClassVar[dict[str, float]] = {"myenv-sorted": 1.0}

    def __init__(self, context: RolloutContext) -> None:
        super().__init__(context)
        tasks = make_tasks(context.options, seed=context.config.seed)
        cut = max(1, int(len(tasks) * (1 - EVAL_SHARE)))
        self._splits = {"train": tasks[:cut], "eval": tasks[cut:]}

    def tasks(self, split: str) -> Sequence[Task]:
        return self._splits[split]

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        from rollyard.episodes import sample_single_turn

        return await sample_single_turn(self.context, task, n)
