"""Multi-turn episodes without token bookkeeping: a :class:`Conversation` keeps the ids, the
loss mask and the logprobs of one episode as the model and the environment take turns."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rollyard.episodes.prompts import ChatTurns, render_prompt
from rollyard.episodes.single_turn import (
    episode_sampling,
    lost_sample,
    new_group_id,
    session_id,
)
from rollyard.errors import RolloutError, TransportError
from rollyard.interfaces import RolloutContext
from rollyard.types import (
    FinishReason,
    GenerateRequest,
    Message,
    Sample,
    SampleStatus,
    Task,
)


@dataclass(frozen=True)
class Turn:
    """What one ``await conv.generate()`` gave: the reply's text (special tokens left out),
    why it ended (``stop``: a stop token; ``length``: ``max_new_tokens`` or the context ran
    out) and its token ids (the stop token included)."""

    text: str
    finish_reason: FinishReason
    ids: tuple[int, ...] = ()


class Conversation:
    """One episode of ``task`` (episode ``index`` of its group) as a growing token sequence.

    Built from the rollout's context, it renders the task's prompt (or ``prompt``: chat
    messages or text) like :func:`rollyard.episodes.render_prompt`, samples with the run's
    sampling, the tokenizer's EOS among the stop ids and the episode's seed, and sends every
    request of the episode with one session id, as :func:`sample_single_turn` does. The
    model's tokens get loss mask 1 and the engine's logprobs; what the environment appends
    gets mask 0. ``room`` is the context left: once it is used up, ``generate`` stops asking
    the engine and the episode ends ``truncated``.
    """

    def __init__(self, context: RolloutContext, task: Task, index: int = 0, *,
                 group_id: str | None = None,
                 prompt: list[Message] | str | None = None) -> None:
        self.context = context
        self.task = task
        self.index = index
        self.group_id = group_id or new_group_id(task)
        self.session_id = session_id(self.group_id, index)
        prompt = task.prompt if prompt is None else prompt
        self.tokens: list[int] = render_prompt(context.tokenizer, prompt)
        self.prompt_len = len(self.tokens)
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        #: How many times the model has been asked for a reply.
        self.turns = 0
        #: Whether the context ran out (the episode then ends ``truncated``).
        self.truncated = False
        self.replies: list[Turn] = []
        self._chat = None if isinstance(prompt, str) else ChatTurns(context.tokenizer, prompt)
        self._since: list[Message] = []  # environment messages since the model's last turn
        self._weight_versions: list[int] = []

    @property
    def room(self) -> int:
        """Tokens the conversation may still grow by before the model's context is full."""
        return max(0, self.context.context_length - len(self.tokens))

    async def generate(self, max_new_tokens: int | None = None) -> Turn:
        """Ask the model for its next reply and append it (mask 1, the engine's logprobs).

        ``max_new_tokens`` lowers the run's for this turn; the room left lowers it too. With
        no room left the engine is not asked: the reply is empty, ``length``, and the
        conversation is ``truncated``. Raises :class:`rollyard.TransportError` (and
        :class:`rollyard.EngineAborted`) as the transport does.
        """
        if self._since and self._chat is not None:
            opening = self._chat.generation_prompt_ids(self._since)
            if len(opening) < self.room:  # else no room to open the turn and reply
                self.add_tokens(opening)
            else:
                self.truncated = True
        self._since = []
        sampling = episode_sampling(self.context, self.index, self.turns)
        limit = min(sampling.max_new_tokens, max_new_tokens or sampling.max_new_tokens,
                    self.room)
        self.turns += 1
        if limit < 1 or self.truncated:
            self.truncated = True
            turn = Turn("", "length")
            self.replies.append(turn)
            return turn
        request = GenerateRequest(list(self.tokens), replace(sampling, max_new_tokens=limit),
                                  session_id=self.session_id)
        result = await self.context.transport.generate(request)
        output = [int(t) for t in result.output_ids]
        self.tokens += output
        self.loss_mask += [1] * len(output)
        self.logprobs += [float(lp) for lp in result.logprobs]
        self._weight_versions.append(result.weight_version)
        if result.finish_reason == "length" and self.room < 1:
            self.truncated = True
        turn = Turn(self.context.tokenizer.decode(output, skip_special_tokens=True),
                    result.finish_reason, tuple(output))
        self.replies.append(turn)
        return turn

    def add_message(self, role: str, content: str, **fields: Any) -> bool:
        """Append a message of the environment (a ``user`` reply, a ``tool`` result) as
        exactly the tokens the chat template adds for it, mask 0; the template's end of the
        model's turn comes first when the engine did not end it with a stop token. The next
        ``generate`` opens the model's turn. ``fields`` go into the message (``name``,
        ``tool_call_id``). For a text prompt the content is appended as plain text.

        Returns False, appending nothing and marking the conversation truncated, when the
        message does not fit in the room left. Raises ValueError for a role the chat
        template does not render.
        """
        message = {"role": role, "content": content, **fields}
        if self._chat is None:
            ids = list(self.context.tokenizer.encode(content, add_special_tokens=False))
        else:
            ids = self._chat.message_ids(self._since, message, self._closing())
        if len(ids) > self.room:
            self.truncated = True
            return False
        self._since.append(message)
        self.add_tokens(ids)
        return True

    def add_tokens(self, ids: Sequence[int]) -> None:
        """Append raw environment tokens (mask 0, logprob 0), with no chat template."""
        ids = [int(i) for i in ids]
        self.tokens += ids
        self.loss_mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)

    def _closing(self) -> str:
        """The text of the stop token that ended the model's last turn, if one did."""
        if not self.replies or self.replies[-1].finish_reason != "stop" or \
                not self.replies[-1].ids:
            return ""
        return self.context.tokenizer.decode([self.replies[-1].ids[-1]],
                                             skip_special_tokens=False)

    def sample(self, status: SampleStatus | str | None = None, *, reward: float = 0.0,
               rewards: dict[str, float] | None = None, **metadata: Any) -> Sample:
        """The episode as a Sample: ``truncated`` when the context ran out, else ``status``
        (default ``completed``); the oldest weight version of its turns; ``completion`` the
        last reply's text (unless given); metadata ``replies``, ``turns`` and ``metadata``.
        Raises RolloutError when the model was never asked (no generated tokens)."""
        if not self._weight_versions:
            raise RolloutError(
                f"task {self.task.id!r}, episode {self.index}: the conversation has no "
                f"tokens from the model (turns asked: {self.turns}); call "
                "`await conv.generate()` before `conv.sample()`")
        if self.truncated:
            status = SampleStatus.TRUNCATED
        return Sample(
            tokens=list(self.tokens), prompt_len=self.prompt_len,
            loss_mask=list(self.loss_mask), logprobs=list(self.logprobs),
            status=SampleStatus(status or SampleStatus.COMPLETED), reward=reward,
            rewards=dict(rewards or {}), task_id=self.task.id, group_id=self.group_id,
            weight_version=min(self._weight_versions),
            completion=metadata.pop("completion", self.replies[-1].text),
            metadata={"replies": [t.text for t in self.replies], "turns": self.turns,
                      **metadata})


#: What ``sample_multi_turn`` runs for each episode: plays the conversation and returns its
#: sample (``conv.sample(...)``), or None for ``conv.sample()``.
Play = Callable[[Conversation], Awaitable[Sample | None]]


async def sample_multi_turn(context: RolloutContext, task: Task, n: int, play: Play, *,
                            prompts: Sequence[list[Message] | str] | None = None,
                            ) -> list[Sample]:
    """Run ``n`` episodes of ``task`` concurrently, each ``await play(conv)`` on its own
    :class:`Conversation` (one group id for all; ``prompts``, one per episode, replace the
    task's prompt). An engine abort makes that episode's
    sample ``aborted``, a transport error or an exception of ``play`` makes it ``failed``;
    the reason names the turn it happened in. The other episodes go on."""
    group_id = new_group_id(task)

    async def episode(index: int) -> Sample:
        conv = Conversation(context, task, index, group_id=group_id,
                            prompt=None if prompts is None else prompts[index])
        try:
            played = await play(conv)
            return played if played is not None else conv.sample()
        except TransportError as exc:  # EngineAborted included
            return lost_sample(task, group_id, exc, conv.tokens[:conv.prompt_len],
                               f"turn {conv.turns}: ")
        except Exception as exc:
            error = RolloutError(f"task {task.id!r}, episode {index}, turn {conv.turns}: "
                                 f"{type(exc).__name__}: {exc}")
            return lost_sample(task, group_id, error, conv.tokens[:conv.prompt_len])

    return list(await asyncio.gather(*(episode(i) for i in range(n))))
