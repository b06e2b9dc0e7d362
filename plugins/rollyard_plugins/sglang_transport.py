"""The ``sglang`` transport: token ids in, tokens and logprobs out, over SGLang's HTTP API.

It drives every engine the project knows (the embedded CPU engine and real SGLang, alone or
behind ``sglang-router``) through ``POST /generate`` with ``return_logprob``. Requests go
round-robin across the engine URLs; a request with a ``session_id`` sticks to the engine that
served its session before (and carries it in the router's routing-key header). Every call
has a timeout; only connection errors are retried, a bounded number of times. Responses are
checked before they become a :class:`rollyard.GenerateResult`: a malformed one raises
:class:`rollyard.TransportError` naming the engine, an aborted one :class:`rollyard.EngineAborted`.

Options (``--sglang-transport-<name>``): ``timeout`` (seconds per generate, default 600),
``connect_timeout`` (5), ``retries`` (3), ``max_connections`` (256).
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rollyard import (
    EngineAborted,
    GenerateRequest,
    GenerateResult,
    Transport,
    TransportError,
    hookimpl,
)
from rollyard.options import non_negative, option, positive

if TYPE_CHECKING:
    import aiohttp

#: Header sglang-router / SGLang model gateway reads a sticky routing key from.
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
#: Sessions remembered for sticky routing (least recently used are forgotten first).
MAX_STICKY_SESSIONS = 65536


@dataclass(frozen=True)
class SGLangTransportOptions:
    """Timeouts, retries and pooling of the ``sglang`` transport (``--sglang-transport-*``)."""

    timeout: float = option(600.0, check=positive, help="seconds one generate request may take")
    connect_timeout: float = option(5.0, check=positive,
                                    help="seconds to open a connection to an engine")
    retries: int = option(3, check=non_negative,
                          help="retries of a request whose connection failed")
    max_connections: int = option(256, check=positive,
                                  help="pooled HTTP connections across all engines")
    control_timeout: float = option(30.0, check=positive,
                                    help="seconds for health, version and cache requests")
    update_timeout: float = option(600.0, check=positive,
                                   help="seconds an engine may take to load new weights")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def parse_weight_version(value: Any, url: str) -> int:
    """SGLang reports the weight version as a string ("default" before any update)."""
    if value is None or value == "default":
        return 0
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    raise TransportError(f"malformed weight_version {value!r} (expected an integer)", url=url)


def parse_generate_response(data: Any, url: str) -> GenerateResult:
    """Check one /generate response (SGLang shape) and convert it; never crash on bad input."""
    def bad(problem: str) -> TransportError:
        return TransportError(f"malformed /generate response: {problem}", url=url)

    if not isinstance(data, dict) or not isinstance(data.get("meta_info"), dict):
        raise bad("expected an object with a meta_info object")
    meta = data["meta_info"]
    finish = meta.get("finish_reason")
    kind = finish.get("type") if isinstance(finish, dict) else finish
    if kind == "abort":
        message = finish.get("message") if isinstance(finish, dict) else None
        raise EngineAborted(f"the engine aborted the request: {message or 'no reason given'}",
                            url=url)
    if kind not in ("stop", "length"):
        raise bad(f"finish_reason {finish!r} is not stop, length or abort")
    entries = meta.get("output_token_logprobs")
    if not isinstance(entries, list):
        raise bad("meta_info.output_token_logprobs is missing (was return_logprob sent?)")
    logprobs: list[float] = []
    token_ids: list[int] = []
    for i, entry in enumerate(entries):
        if (not isinstance(entry, (list, tuple)) or len(entry) < 2 or not _number(entry[0])
                or not isinstance(entry[1], int) or isinstance(entry[1], bool)
                or entry[1] < 0 or not math.isfinite(entry[0]) or entry[0] > 1e-4):
            raise bad(f"output_token_logprobs[{i}] is {entry!r}; expected [finite logprob "
                      "<= 0, token_id, text]")
        logprobs.append(min(float(entry[0]), 0.0))  # float rounding may give +1e-7
        token_ids.append(entry[1])
    output_ids = data.get("output_ids", token_ids)
    if output_ids != token_ids:
        raise bad("output_ids differ from the token ids in output_token_logprobs")
    completion = meta.get("completion_tokens", len(token_ids))
    if completion != len(token_ids):
        raise bad(f"completion_tokens is {completion!r} but {len(token_ids)} logprobs came back")
    if kind == "stop" and not token_ids:
        raise bad("finish_reason stop with no output tokens")
    return GenerateResult(output_ids=token_ids, logprobs=logprobs, finish_reason=kind,
                          weight_version=parse_weight_version(meta.get("weight_version"), url))


def generate_payload(request: GenerateRequest) -> dict[str, Any]:
    """The /generate body for ``request`` (token ids in, logprobs requested)."""
    sampling = request.sampling
    params: dict[str, Any] = {
        "max_new_tokens": sampling.max_new_tokens, "temperature": sampling.temperature,
        "top_p": sampling.top_p, "top_k": sampling.top_k, "no_stop_trim": True,
        "skip_special_tokens": False}
    if sampling.stop_token_ids:
        params["stop_token_ids"] = list(sampling.stop_token_ids)
    if sampling.seed is not None:
        params["sampling_seed"] = sampling.seed
    if sampling.min_new_tokens:
        params["min_new_tokens"] = sampling.min_new_tokens
    return {"input_ids": list(request.input_ids), "sampling_params": params,
            "return_logprob": True}


class SGLangTransport(Transport):
    """Async client of SGLang-protocol engines with pooling, timeouts and sticky sessions."""

    name = "sglang"
    Options = SGLangTransportOptions
    options_prefix = "sglang-transport"

    def __init__(self, urls: Sequence[str], options: Any = None) -> None:
        urls = [u.rstrip("/") for u in urls]
        if not urls:
            raise TransportError("the sglang transport needs at least one engine URL")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise TransportError(f"engine URL {url!r} must start with http:// or https://")
        super().__init__(urls, options)
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._next = 0
        self._sticky: collections.OrderedDict[str, str] = collections.OrderedDict()

    # ------------------------------------------------------------------ routing

    def route(self, session_id: str | None) -> str:
        """The engine URL for a request: sticky by session, else round-robin."""
        if session_id is not None and session_id in self._sticky:
            self._sticky.move_to_end(session_id)
            return self._sticky[session_id]
        url = self.urls[self._next % len(self.urls)]
        self._next += 1
        if session_id is not None:
            self._sticky[session_id] = url
            if len(self._sticky) > MAX_STICKY_SESSIONS:
                self._sticky.popitem(last=False)
        return url

    # ------------------------------------------------------------------ HTTP

    def _client(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            # A session belongs to the event loop it was made in; a new loop needs a new one.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.options.max_connections))
            self._session_loop = loop
        return self._session

    async def _request(self, method: str, url: str, path: str, *, timeout: float,
                       payload: Any = None, headers: dict[str, str] | None = None,
                       retry: bool = True) -> Any:
        """One HTTP call; returns the decoded JSON (or text). Retries connection errors only."""
        import aiohttp

        limits = aiohttp.ClientTimeout(total=timeout,
                                       sock_connect=self.options.connect_timeout)
        attempts = self.options.retries + 1 if retry else 1
        for attempt in range(attempts):
            try:
                async with self._client().request(method, url + path, json=payload,
                                                  headers=headers, timeout=limits) as response:
                    body = await response.read()
                    status = response.status
                break
            except aiohttp.ClientConnectorError as exc:  # never sent: safe to retry
                if attempt + 1 == attempts:
                    raise TransportError(f"{method} {path} failed after {attempts} attempts: "
                                         f"{type(exc).__name__}: {exc}", url=url) from exc
                await asyncio.sleep(min(0.2 * 2**attempt, 2.0))
            except TimeoutError as exc:
                raise TransportError(f"{method} {path} timed out after {timeout:.0f} s",
                                     url=url) from exc
            except aiohttp.ClientError as exc:
                raise TransportError(f"{method} {path} failed: {type(exc).__name__}: {exc}",
                                     url=url) from exc
        text = body.decode(errors="replace")
        if status != 200:
            raise TransportError(f"{method} {path} returned HTTP {status}: {_error_text(text)}",
                                 url=url)
        try:
            return json.loads(text) if text.strip() else None
        except json.JSONDecodeError:
            return text

    # ------------------------------------------------------------------ Transport API

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        url = self.route(request.session_id)
        headers = {ROUTING_KEY_HEADER: request.session_id} if request.session_id else None
        data = await self._request("POST", url, "/generate", payload=generate_payload(request),
                                   headers=headers, timeout=self.options.timeout)
        return parse_generate_response(data, url)

    async def health(self) -> dict[str, bool]:
        async def one(url: str) -> bool:
            try:
                await self._request("GET", url, "/health", retry=False,
                                    timeout=self.options.connect_timeout)
                return True
            except TransportError:
                return False

        return dict(zip(self.urls, await asyncio.gather(*(one(u) for u in self.urls))))

    async def weight_versions(self) -> dict[str, int]:
        async def one(url: str) -> int:
            info = await self._request("GET", url, "/get_model_info",
                                       timeout=self.options.control_timeout)
            if not isinstance(info, dict):
                raise TransportError(f"malformed /get_model_info response: {info!r}", url=url)
            return parse_weight_version(info.get("weight_version"), url)

        return dict(zip(self.urls, await asyncio.gather(*(one(u) for u in self.urls))))

    async def update_weights(self, model_dir: str, weight_version: int) -> None:
        async def one(url: str) -> None:
            reply = await self._request(
                "POST", url, "/update_weights_from_disk",
                payload={"model_path": str(model_dir), "weight_version": str(weight_version)},
                timeout=self.options.update_timeout)
            if not isinstance(reply, dict) or reply.get("success") is not True:
                raise TransportError(f"weight update from {model_dir} failed: {reply!r}", url=url)

        await asyncio.gather(*(one(u) for u in self.urls))
        versions = await self.weight_versions()
        stale = {u: v for u, v in versions.items() if v != weight_version}
        if stale:
            raise TransportError(f"after the weight update to version {weight_version}, engines "
                                 f"still report {stale}", url=next(iter(stale)))

    async def close(self) -> None:
        if (self._session is not None and not self._session.closed
                and self._session_loop is asyncio.get_running_loop()):
            await self._session.close()
        self._session = None


def _error_text(text: str) -> str:
    """The message of an SGLang error body ({"error": {"message": ...}}), else the text."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return text.strip()[:500]
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        if isinstance(error, str):
            return error
    return text.strip()[:500]


@hookimpl
def register_transports(register: Any) -> None:
    register(SGLangTransport)
