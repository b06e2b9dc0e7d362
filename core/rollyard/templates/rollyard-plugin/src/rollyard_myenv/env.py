"""The environment: sort the letters of a word, in one turn."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar

from rollyard import ConfigError, Rollout, RolloutContext, Sample, Task

ALPHABET = "abcdefgh"
DEFAULT_NUM_TASKS = 200
DEFAULT_WORD_LENGTH = 4
EVAL_SHARE = 0.2


def make_tasks(count: int, length: int, seed: int) -> list[Task]:
    """``count`` distinct words of ``length`` letters, in an order fixed by ``seed``."""
    possible = len(ALPHABET) ** length
    if length < 2 or not 2 <= count <= possible:
        raise ConfigError(f"--myenv-num-tasks {count} with --myenv-word-length {length}: "
                          f"choose a length of at least 2 and 2..{possible} tasks")
    rng = random.Random(f"myenv-{seed}")
    words: dict[str, None] = {}
    while len(words) < count:
        words["".join(rng.choice(ALPHABET) for _ in range(length))] = None
    return [Task(id=f"sort-{word}", prompt=[{"role": "user", "content": f"sort: {word}"}],
                 data={"answer": "".join(sorted(word))}) for word in words]


class SortLetters(Rollout):
    """Single turn: the model sees ``sort: dbca`` and must answer ``abcd``."""

    name = "myenv"
    default_rewards: ClassVar[dict[str, float]] = {"myenv-sorted": 1.0}

    def __init__(self, context: RolloutContext) -> None:
        super().__init__(context)
        tasks = make_tasks(int(context.options.get("num_tasks", DEFAULT_NUM_TASKS)),
                           int(context.options.get("word_length", DEFAULT_WORD_LENGTH)),
                           seed=int(context.config.get("seed") or 0))
        cut = max(1, int(len(tasks) * (1 - EVAL_SHARE)))
        self._splits = {"train": tasks[:cut], "eval": tasks[cut:]}

    def tasks(self, split: str) -> Sequence[Task]:
        return self._splits[split]

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        from rollyard.episodes import sample_single_turn

        return await sample_single_turn(self.context, task, n)
