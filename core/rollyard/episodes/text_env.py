"""A step-style environment: the model's reply in, the environment's messages, a reward and
whether it is done out — no token code."""

from __future__ import annotations

import copy
import inspect
from abc import abstractmethod
from typing import Any, ClassVar

from rollyard.episodes.conversation import Conversation, sample_multi_turn
from rollyard.interfaces import Rollout
from rollyard.types import Message, Sample, SampleStatus, Task

#: What ``step`` returns: messages for the model, this turn's reward, whether it is done.
StepResult = tuple[list[Message], float, bool]


class TextEnv(Rollout):
    """A multi-turn rollout written as ``reset(task)`` and ``step(reply_text)``.

    Each episode runs on a shallow copy of the rollout, so ``reset`` may keep the episode's
    state on ``self`` (assigned there: objects made in ``__init__`` are shared by every
    copy). ``reset`` returns the opening messages (default: the task's prompt);
    then, up to ``max_turns`` times, the model replies and ``step`` answers with messages to
    append, a reward and whether the episode is done. The sample's reward is the sum of the
    step rewards plus :meth:`final_reward` (``rewards["env"]``); an episode that runs out of
    turns or of context ends ``truncated``. ``reset``, ``step`` and ``final_reward`` may be
    ``async``. A ``step`` that raises fails that episode (the reason names the turn); the
    group goes on.
    """

    #: Model turns per episode at most.
    max_turns: ClassVar[int] = 4

    def reset(self, task: Task) -> list[Message] | str:
        """Start an episode of ``task``; return the opening prompt (messages or text)."""
        return task.prompt

    @abstractmethod
    def step(self, reply: str) -> StepResult:
        """React to the model's reply: (messages to append, reward, done)."""

    def final_reward(self) -> float | None:
        """A reward for the whole episode, once it ended (None: only the step rewards)."""
        return None

    async def run_group(self, task: Task, n: int) -> list[Sample]:
        episodes = [copy.copy(self) for _ in range(n)]
        prompts = [await _maybe(env.reset(task)) for env in episodes]

        async def play(conv: Conversation) -> Sample:
            env = episodes[conv.index]
            total, done = 0.0, False
            while not done and conv.turns < env.max_turns and not conv.truncated:
                turn = await conv.generate()
                if conv.truncated:
                    break
                messages, reward, done = await _maybe(env.step(turn.text))
                total += float(reward)
                for message in messages:
                    if not conv.add_message(**message):
                        break
            final = await _maybe(env.final_reward())
            total += float(final or 0.0)
            status = SampleStatus.COMPLETED if done else SampleStatus.TRUNCATED
            return conv.sample(status, reward=total, rewards={"env": total})

        return await sample_multi_turn(self.context, task, n, play, prompts=prompts)


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
