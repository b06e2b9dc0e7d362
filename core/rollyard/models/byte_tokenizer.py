"""A pure-Python byte-level tokenizer with ChatML specials, for the light core.

Without ``rollyard[train]`` (no ``transformers``), :func:`rollyard.testing.tiny_tokenizer` is
this one: every byte is one token (ids 0–255), the ChatML specials follow, and the chat
template is the tiny models' ChatML. It offers the part of the Hugging Face tokenizer API that
rollouts and rewards use (``encode``, ``decode``, ``apply_chat_template``, ``eos_token_id``,
``pad_token_id``, ``len``); any text round-trips.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from rollyard.models.tokenizer import ENDOFTEXT, IM_END, IM_START, SPECIAL_TOKENS

_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIAL_TOKENS) + ")")


class ByteChatTokenizer:
    """Bytes as tokens, then :data:`~rollyard.models.tokenizer.SPECIAL_TOKENS`."""

    name_or_path = "rollyard-byte-chatml"

    def __init__(self) -> None:
        self.special_ids = {token: 256 + i for i, token in enumerate(SPECIAL_TOKENS)}
        self.eos_token, self.pad_token = IM_END, ENDOFTEXT
        self.eos_token_id = self.special_ids[IM_END]
        self.pad_token_id = self.special_ids[ENDOFTEXT]

    def __len__(self) -> int:
        return 256 + len(SPECIAL_TOKENS)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; special tokens written in the text become their ids."""
        ids: list[int] = []
        for part in _SPECIAL_SPLIT.split(text):
            if part in self.special_ids:
                ids.append(self.special_ids[part])
            else:
                ids.extend(part.encode("utf-8"))
        return ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        names = {i: token for token, i in self.special_ids.items()}
        out, pending = [], bytearray()
        for token in ids:
            token = int(token)
            if token < 256:
                pending.append(token)
                continue
            out.append(pending.decode("utf-8", errors="replace"))
            pending.clear()
            if not skip_special_tokens:
                out.append(names[token])
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)

    def apply_chat_template(self, messages: list[Mapping[str, Any]], tokenize: bool = True,
                            add_generation_prompt: bool = False, **_: Any) -> list[int] | str:
        """ChatML, as :data:`~rollyard.models.tokenizer.CHAT_TEMPLATE` renders it."""
        text = "".join(f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n" for m in messages)
        if add_generation_prompt:
            text += f"{IM_START}assistant\n"
        return self.encode(text) if tokenize else text
