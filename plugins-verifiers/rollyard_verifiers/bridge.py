"""The Renderer-to-SGLang bridge: vLLM-style generate requests served by a rollyard transport.

:class:`Bridge` holds the one translation (:mod:`rollyard_verifiers.translate`) and the
transport; :class:`BridgeServer` serves it on loopback HTTP to verifiers' train client, which
is built from a base URL (verifiers >= 0.3). The bridge also remembers, per session id
(verifiers sends the trace id as ``X-Session-ID``), the weight versions that served it and any
engine failure, so that samples can carry them.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollyard import EngineAborted, Transport, TransportError

from rollyard_verifiers import openai_api
from rollyard_verifiers.translate import (
    BridgeError,
    EngineResultError,
    build_choice,
    translate_request,
)

GENERATE_PATH = "/inference/v1/generate"
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
MODELS_PATH = "/v1/models"
SESSION_HEADER = "X-Session-ID"
#: Session records kept at most; the oldest go first (their trace was lost to an error).
MAX_SESSIONS = 65536


@dataclass(frozen=True)
class RecordedCall:
    """One model call of a session, as the engine saw it: the prompt ids sent, the ids it
    sampled and their logprobs."""

    prompt_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]


@dataclass
class SessionRecord:
    """What the engines did for one session (one verifiers trace or legacy rollout)."""

    weight_versions: list[int] = field(default_factory=list)
    calls: list[RecordedCall] = field(default_factory=list)
    aborted: str | None = None
    failed: str | None = None


class Bridge:
    """Translates one generate request, sends it through ``transport``, translates back.
    With a ``tokenizer`` it also serves OpenAI chat and text completions
    (:mod:`rollyard_verifiers.openai_api`), rendering prompts with it."""

    def __init__(self, transport: Transport, model: str = "rollyard",
                 max_model_len: int | None = None, tokenizer: Any = None) -> None:
        self.transport = transport
        self.model = model
        self.max_model_len = max_model_len
        self.tokenizer = tokenizer
        self._sessions: collections.OrderedDict[str, SessionRecord] = collections.OrderedDict()

    def models(self) -> dict[str, Any]:
        """The ``GET /v1/models`` payload; ``max_model_len`` lets renderers pre-check prompts."""
        card: dict[str, Any] = {"id": self.model, "object": "model"}
        if self.max_model_len is not None:
            card["max_model_len"] = self.max_model_len
        return {"object": "list", "data": [card]}

    async def generate(self, body: Mapping[str, Any],
                       session_id: str | None = None) -> dict[str, Any]:
        """The vLLM response for ``body``. Raises :class:`BridgeError` for a request or result
        that cannot cross, :class:`rollyard.EngineAborted` for an engine abort and
        :class:`rollyard.TransportError` when the engine cannot be reached."""
        request = translate_request(body, session_id, self.max_model_len)
        record = self._record(session_id) if session_id else None
        try:
            result = await self.transport.generate(request)
        except EngineAborted as exc:
            if record is not None:
                record.aborted = str(exc)
            raise
        except TransportError as exc:
            if record is not None:
                record.failed = str(exc)
            raise
        try:
            choice = build_choice(result)
        except EngineResultError as exc:
            if record is not None:
                record.failed = str(exc)
            raise
        if record is not None:
            record.weight_versions.append(result.weight_version)
            record.calls.append(RecordedCall(list(request.input_ids), choice["token_ids"],
                                             [c["logprob"] for c in choice["logprobs"]["content"]]))
        return {"request_id": f"rollyard-{uuid.uuid4().hex}", "choices": [choice]}

    async def chat(self, body: Mapping[str, Any],
                   session_id: str | None = None) -> dict[str, Any]:
        """The ``chat.completion`` for an OpenAI chat request (errors as :meth:`generate`)."""
        tokenizer = self._require_tokenizer()
        prompt_ids = openai_api.chat_prompt_ids(tokenizer, body)
        params = openai_api.sampling_params(body, frozenset({"messages", "tools"}))
        choice = await self._choice(prompt_ids, params, session_id)
        text = tokenizer.decode(choice["token_ids"], skip_special_tokens=True)
        return openai_api.chat_response(self.model, prompt_ids, choice, text)

    async def completion(self, body: Mapping[str, Any],
                         session_id: str | None = None) -> dict[str, Any]:
        """The ``text_completion`` for an OpenAI completion request."""
        tokenizer = self._require_tokenizer()
        prompt_ids = openai_api.completion_prompt_ids(tokenizer, body)
        params = openai_api.sampling_params(body, frozenset({"prompt"}))
        choice = await self._choice(prompt_ids, params, session_id)
        text = tokenizer.decode(choice["token_ids"], skip_special_tokens=True)
        return openai_api.completion_response(self.model, prompt_ids, choice, text)

    async def _choice(self, prompt_ids: list[int], params: dict[str, Any],
                      session_id: str | None) -> dict[str, Any]:
        response = await self.generate({"token_ids": prompt_ids, "sampling_params": params},
                                       session_id)
        return response["choices"][0]

    def _require_tokenizer(self) -> Any:
        if self.tokenizer is None:
            raise BridgeError("this bridge has no tokenizer, so it serves only "
                              f"{GENERATE_PATH} (token ids in, token ids out)")
        return self.tokenizer

    def _record(self, session_id: str) -> SessionRecord:
        record = self._sessions.get(session_id)
        if record is None:
            record = self._sessions[session_id] = SessionRecord()
            if len(self._sessions) > MAX_SESSIONS:  # traces that were never collected
                self._sessions.popitem(last=False)
        return record

    def pop_session(self, session_id: str) -> SessionRecord:
        """Forget and return what was recorded for ``session_id`` (empty if nothing)."""
        return self._sessions.pop(session_id, None) or SessionRecord()


class BridgeServer:
    """The HTTP face on loopback: ``POST /inference/v1/generate``, ``GET /v1/models``, and
    ``POST /v1/chat/completions`` and ``/v1/completions`` (OpenAI clients, verifiers < 0.2).

    Use as ``async with BridgeServer(bridge) as server: server.base_url``. Errors come back
    as JSON ``{"error": {"type", "message"}}``: 400 for a request the bridge refuses, 502 for
    an unreachable engine or an unusable result, 503 for an engine abort.
    """

    def __init__(self, bridge: Bridge, host: str = "127.0.0.1", port: int = 0) -> None:
        self.bridge = bridge
        self.host = host
        self.port = port
        self._runner: Any = None

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (ending in ``/v1``) clients are configured with."""
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=256 * 1024**2)
        app.router.add_post(GENERATE_PATH, self._serve(self.bridge.generate))
        app.router.add_post(CHAT_PATH, self._serve(self.bridge.chat))
        app.router.add_post(COMPLETIONS_PATH, self._serve(self.bridge.completion))
        app.router.add_get(MODELS_PATH, self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the bound port when 0 was asked

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> BridgeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _models(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(self.bridge.models())

    @staticmethod
    def _serve(handle: Any) -> Any:
        """An aiohttp handler calling ``handle(body, session_id)``, its errors as JSON."""
        from aiohttp import web

        def error(status: int, kind: str, exc: Exception) -> Any:
            return web.json_response({"error": {"type": kind, "message": str(exc)}},
                                     status=status)

        async def serve(request: Any) -> Any:
            try:
                body = await request.json()
            except ValueError as exc:
                return error(400, "invalid_request",
                             BridgeError(f"request body is not JSON: {exc}"))
            if not isinstance(body, Mapping):
                return error(400, "invalid_request", BridgeError(
                    f"request body must be a JSON object, got {type(body).__name__}"))
            try:
                response = await handle(body, request.headers.get(SESSION_HEADER))
            except EngineResultError as exc:
                return error(502, "engine_result_invalid", exc)
            except BridgeError as exc:
                return error(400, "invalid_request", exc)
            except EngineAborted as exc:
                return error(503, "engine_aborted", exc)
            except TransportError as exc:
                return error(502, "engine_error", exc)
            return web.json_response(response)

        return serve
