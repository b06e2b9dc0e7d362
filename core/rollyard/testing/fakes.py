"""Stand-ins for what surrounds a plugin under test: a scripted inference engine and the tiny
model's tokenizer. Neither is part of the plugin, so faking them tests the plugin for real."""

from __future__ import annotations

import atexit
import functools
import importlib.util
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollyard.errors import TransportError
from rollyard.interfaces import Transport
from rollyard.types import GenerateRequest, GenerateResult

#: One scripted engine reply: output token ids or text (encoded with the transport's
#: tokenizer), both cut at the first stop token and ended with one as a real engine would; a
#: whole GenerateResult, returned as is; an exception to raise (EngineAborted,
#: TransportError …); or a function of the request returning any of these.
Reply = list[int] | str | GenerateResult | BaseException | Callable[[GenerateRequest], Any]

SCRIPTED_URL = "scripted://engine"


@dataclass
class _Echo:
    """The default reply: the last few prompt tokens (then the stop token)."""

    tokens: int = 3

    def __call__(self, request: GenerateRequest) -> list[int]:
        return list(request.input_ids[-self.tokens:])


class ScriptedTransport(Transport):
    """A transport whose engine answers from a script instead of a model.

    Replies are used in order, one per ``generate`` call, and cycle when the script runs out;
    with ``per_session`` every session (``GenerateRequest.session_id``: one episode) plays the
    script from its start instead, so concurrent episodes get the same replies whatever their
    order. With no script it echoes the prompt's last tokens. Like a real engine it rejects
    malformed requests with :class:`rollyard.TransportError`, stops at the first stop token
    and includes it in ``output_ids`` (finish reason ``stop``: the request's first stop id, or
    the tokenizer's EOS, ends a reply that has none), cuts outputs at ``max_new_tokens``
    (finish reason ``length``) and returns one logprob per output token: ``logprob``, or
    ``logprob(position)`` when it is a function. Every request is kept in ``requests``, and
    every request with the result it got in ``calls``::

        transport = ScriptedTransport(["12", EngineAborted("engine restarted")], tokenizer=tok)
    """

    name = "scripted"

    def __init__(self, replies: Sequence[Reply] = (), *, tokenizer: Any = None,
                 logprob: float | Callable[[int], float] = -0.5, weight_version: int = 0,
                 per_session: bool = False) -> None:
        super().__init__([SCRIPTED_URL])
        self.replies: list[Reply] = list(replies)
        self.tokenizer = tokenizer
        self.logprob = logprob
        self.weight_version = weight_version
        self.per_session = per_session
        self.requests: list[GenerateRequest] = []
        self.calls: list[tuple[GenerateRequest, GenerateResult]] = []
        self._session_turns: dict[str | None, int] = {}

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self._check(request)
        script = self.replies or [_Echo()]
        if self.per_session:
            turn = self._session_turns.get(request.session_id, 0)
            self._session_turns[request.session_id] = turn + 1
        else:
            turn = len(self.requests)
        reply = script[turn % len(script)]
        self.requests.append(request)
        while callable(reply) and not isinstance(reply, (BaseException, GenerateResult)):
            reply = reply(request)
        if isinstance(reply, BaseException):
            raise reply
        result = reply if isinstance(reply, GenerateResult) else self._result(reply, request)
        self.calls.append((request, result))
        return result

    def _result(self, reply: list[int] | str, request: GenerateRequest) -> GenerateResult:
        if isinstance(reply, str):
            if self.tokenizer is None:
                raise TypeError("ScriptedTransport: a text reply needs tokenizer=...")
            reply = list(self.tokenizer.encode(reply, add_special_tokens=False))
        stops = list(request.sampling.stop_token_ids)
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if not stops and eos is not None:
            stops = [eos]
        output = [int(t) for t in reply]
        ended = next((i for i, t in enumerate(output) if t in stops), None)
        if ended is not None:
            output = output[:ended + 1]
        elif stops:
            output.append(stops[0])
        limit = request.sampling.max_new_tokens
        finish = "length" if len(output) > limit else "stop"
        output = output[:limit]
        logprobs = [self.logprob(i) if callable(self.logprob) else self.logprob
                    for i in range(len(output))]
        return GenerateResult(output_ids=output, logprobs=logprobs, finish_reason=finish,
                              weight_version=self.weight_version)

    def _check(self, request: GenerateRequest) -> None:
        """Reject what a real engine would answer with HTTP 400."""
        ids = request.input_ids
        vocab = len(self.tokenizer) if self.tokenizer is not None else None
        if not isinstance(ids, list) or not ids:
            raise TransportError(f"bad request: input_ids must be a non-empty list, got "
                                 f"{ids!r:.60}", url=SCRIPTED_URL)
        for i, token in enumerate(ids):
            if not isinstance(token, int) or isinstance(token, bool) or token < 0 or \
                    (vocab is not None and token >= vocab):
                raise TransportError(f"bad request: input_ids[{i}] = {token!r} is not a token "
                                     f"id of the vocabulary (size {vocab})", url=SCRIPTED_URL)
        if request.sampling.max_new_tokens < 1:
            raise TransportError(f"bad request: max_new_tokens = "
                                 f"{request.sampling.max_new_tokens}", url=SCRIPTED_URL)

    async def health(self) -> dict[str, bool]:
        return {SCRIPTED_URL: True}

    async def weight_versions(self) -> dict[str, int]:
        return {SCRIPTED_URL: self.weight_version}

    async def update_weights(self, model_dir: str, weight_version: int) -> None:
        self.weight_version = weight_version


@functools.cache
def tiny_tokenizer(folder: str | Path | None = None) -> Any:
    """The tokenizer of ``rollyard init-model``'s tiny models (ChatML chat template, EOS), saved
    to ``folder`` and loaded back with ``AutoTokenizer`` as a run loads it from its model folder;
    built once per process and folder. Without a folder it uses a temporary one that lives
    as long as the process (plugins such as verifiers reload the tokenizer from its path).

    It is the tokenizer :func:`rollyard.models.tiny.build_tiny_model` writes, without building
    the model weights (which would import torch). In the light core (no ``transformers``) it is
    :class:`rollyard.models.byte_tokenizer.ByteChatTokenizer`: the same specials and chat
    template, one token per byte."""
    if importlib.util.find_spec("transformers") is None:
        from rollyard.models.byte_tokenizer import ByteChatTokenizer

        return ByteChatTokenizer()
    from transformers import AutoTokenizer

    from rollyard.models.tiny import VOCAB_SIZE
    from rollyard.models.tokenizer import train_tokenizer

    if folder is None:
        folder = tempfile.mkdtemp(prefix="rollyard-tokenizer-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    train_tokenizer(VOCAB_SIZE).save_pretrained(str(folder))
    return AutoTokenizer.from_pretrained(str(folder))
