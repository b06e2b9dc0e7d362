"""The environment: find a secret number in a few guesses, told "higher" or "lower".

Written step-style (``rollyard.episodes.TextEnv``): ``reset`` opens an episode, ``step``
answers each reply. rollyard keeps the conversation's tokens, loss mask and logprobs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rollyard import Task
from rollyard.episodes import StepResult, TextEnv
from rollyard.options import at_least, option

EVAL_SHARE = 0.2


@dataclass(frozen=True)
class MyenvOptions:
    """The ``--myenv-*`` options (the ``[myenv]`` table of a run.toml), declared once."""

    max_number: int = option(20, check=at_least(2), help="secrets are 1..N, split 80/20 "
                                                         "into train and eval")
    turns: int = option(4, check=at_least(1), help="guesses per episode")


def make_tasks(options: MyenvOptions) -> list[Task]:
    prompt = f"Guess my number from 1 to {options.max_number}. Reply with a number."
    return [Task(id=f"secret-{n}", prompt=[{"role": "user", "content": prompt}],
                 data={"secret": n}) for n in range(1, options.max_number + 1)]


class GuessNumber(TextEnv):
    """Reward 1 for finding the secret within ``--myenv-turns`` guesses."""

    name = "myenv"
    Options = MyenvOptions

    def tasks(self, split: str) -> list[Task]:
        tasks = make_tasks(self.context.options)
        cut = max(1, int(len(tasks) * (1 - EVAL_SHARE)))
        return tasks[:cut] if split == "train" else tasks[cut:]

    def reset(self, task: Task) -> list[dict[str, str]]:
        # each episode runs on its own copy of the rollout: its state may live on self
        self.secret, self.max_turns = task.data["secret"], self.context.options.turns
        return task.prompt

    def step(self, reply: str) -> StepResult:
        found = re.search(r"\d+", reply)
        if found is None:
            return [{"role": "user", "content": "Reply with a number."}], 0.0, False
        guess = int(found.group())
        if guess == self.secret:
            return [], 1.0, True
        hint = "higher" if guess < self.secret else "lower"
        return [{"role": "user", "content": hint}], 0.0, False
