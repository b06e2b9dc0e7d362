"""Prompts as token ids: a task's prompt, and the tokens a chat template adds for a message
that an environment appends after the model's turn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rollyard.types import Message

#: Stands for the model's reply when the template renders the turns around it.
_REPLY = "\x00rollyard-reply\x00"


def render_prompt(tokenizer: Any, prompt: list[Message] | str) -> list[int]:
    """Token ids of a task prompt: chat messages through the tokenizer's chat template (with
    the assistant turn opened), plain text as is."""
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt, add_special_tokens=False))
    return _ids(tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True))


def _ids(ids: Any) -> list[int]:
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 returns an encoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


class ChatTurns:
    """What the chat template of ``tokenizer`` adds around the messages an environment
    appends to a conversation that began with ``prompt``.

    The template renders the prompt, the model's reply (a placeholder) and the environment's
    messages as text; the text after the reply is what the template adds, so it is encoded
    exactly as ``apply_chat_template`` would encode it. Earlier environment messages of the
    same gap are kept, so templates that group messages (consecutive tool results) see them.
    """

    def __init__(self, tokenizer: Any, prompt: list[Message]) -> None:
        self.tokenizer = tokenizer
        self.prompt = list(prompt)

    def _text(self, messages: Sequence[Message], generation_prompt: bool) -> str:
        try:
            return self.tokenizer.apply_chat_template(
                [*self.prompt, {"role": "assistant", "content": _REPLY}, *messages],
                tokenize=False, add_generation_prompt=generation_prompt)
        except Exception as exc:  # jinja's raise_exception, a template without that role
            roles = sorted({str(m.get("role")) for m in messages})
            raise ValueError(f"the tokenizer's chat template cannot render a message with "
                             f"role {roles}: {type(exc).__name__}: {exc}") from exc

    def message_ids(self, before: Sequence[Message], message: Message,
                    closing: str = "") -> list[int]:
        """Token ids the template adds for ``message`` after the model's reply and the
        environment messages ``before`` (of this gap). ``closing`` is the text of the stop
        token that already ended the model's turn: not added again."""
        if before:
            start = self._text(before, False)
        else:
            start = self._text([], True)  # up to the reply: the opened assistant turn
            start = start[:start.index(_REPLY) + len(_REPLY)]
        text = self._text([*before, message], False)
        if not text.startswith(start):
            raise ValueError("the tokenizer's chat template renders the earlier turns "
                             "differently once a message follows; append its tokens with "
                             "add_tokens instead")
        added = text[len(start):]
        content = str(message.get("content", ""))
        if content and content not in added:
            raise ValueError(f"the tokenizer's chat template does not render a message with "
                             f"role {message.get('role')!r} (its content is not in the "
                             f"rendered text)")
        if not before and closing and added.startswith(closing):
            added = added[len(closing):]
        return list(self.tokenizer.encode(added, add_special_tokens=False))

    def generation_prompt_ids(self, before: Sequence[Message]) -> list[int]:
        """Token ids that open the model's next turn after the environment messages
        ``before``."""
        closed = self._text(before, False)
        opened = self._text(before, True)
        if not opened.startswith(closed):
            raise ValueError("the tokenizer's chat template renders the conversation "
                             "differently with the generation prompt")
        return list(self.tokenizer.encode(opened[len(closed):], add_special_tokens=False))
