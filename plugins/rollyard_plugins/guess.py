"""The ``guess`` rollout: a multi-turn game written step-style (:class:`rollyard.episodes.TextEnv`).

The model guesses a secret number; the environment answers "higher" or "lower" until it is
found or the turns run out. Reward 1 for finding it. No token code: the conversation's ids,
loss mask and logprobs are kept by rollyard.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rollyard import Task, hookimpl
from rollyard.episodes import StepResult, TextEnv
from rollyard.options import at_least, option


@dataclass(frozen=True)
class GuessOptions:
    """The ``--guess-*`` options."""

    max_number: int = option(10, check=at_least(2), help="secrets are 1..N; the last fifth "
                                                         "of them are the eval split")
    turns: int = option(4, check=at_least(1), help="guesses per episode")


class Guess(TextEnv):
    """Find the secret number in ``--guess-turns`` guesses, told "higher" or "lower"."""

    name = "guess"
    Options = GuessOptions

    def tasks(self, split: str) -> list[Task]:
        top = self.context.options.max_number
        tasks = [Task(id=f"guess-{n}", data={"secret": n}, prompt=[{
            "role": "user", "content": f"Guess my number from 1 to {top}. Reply with a number."}])
            for n in range(1, top + 1)]
        cut = top - max(1, top // 5)
        return tasks[:cut] if split == "train" else tasks[cut:]

    def reset(self, task: Task) -> list[dict[str, str]]:
        self.secret, self.max_turns = task.data["secret"], self.context.options.turns
        return task.prompt

    def step(self, reply: str) -> StepResult:
        found = re.search(r"\d+", reply)
        if found is None:
            return [{"role": "user", "content": "Reply with a number."}], 0.0, False
        if int(found.group()) == self.secret:
            return [], 1.0, True
        hint = "higher" if int(found.group()) < self.secret else "lower"
        return [{"role": "user", "content": hint}], 0.0, False


@hookimpl
def register_rollouts(register):
    register(Guess)
