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
import contextlib
import json
import math
from collections.abc import Mapping, Sequence
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
from rollyard.bearer import auth_header, read_token
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
    api_key_file: str | None = option(
        None, metavar="FILE", help="file holding the engines' API key (SGLang's --api-key, "
                                   "--embedded-api-key-file), sent as a bearer token")


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


def _malformed(url: str, problem: str) -> TransportError:
    return TransportError(f"malformed /generate response: {problem}", url=url)


def parse_generate_response(data: Any, url: str) -> GenerateResult:
    """Check one /generate response (SGLang shape) and convert it; never crash on bad input.
    An aborted one raises EngineAborted, carrying its output so far when that is well formed."""
    if not isinstance(data, dict) or not isinstance(data.get("meta_info"), dict):
        raise _malformed(url, "expected an object with a meta_info object")
    meta = data["meta_info"]
    finish = meta.get("finish_reason")
    kind = finish.get("type") if isinstance(finish, dict) else finish
    if kind not in ("stop", "length", "abort"):
        raise _malformed(url, f"finish_reason {finish!r} is not stop, length or abort")
    if kind == "abort":
        message = finish.get("message") if isinstance(finish, dict) else None
        try:  # what it generated before the abort
            partial = _parse_output(data, meta, "abort", url)
        except TransportError:  # not said, or not well formed: nothing to go on from
            partial = None
        raise EngineAborted(f"the engine aborted the request: {message or 'no reason given'}",
                            url=url, partial=partial)
    return _parse_output(data, meta, kind, url)


def _parse_output(data: dict[str, Any], meta: dict[str, Any], kind: str,
                  url: str) -> GenerateResult:
    """The tokens and logprobs of a response whose finish_reason is ``kind``."""
    entries = meta.get("output_token_logprobs")
    if not isinstance(entries, list):
        raise _malformed(url, "meta_info.output_token_logprobs is missing (was return_logprob "
                              "sent?)")
    logprobs: list[float] = []
    token_ids: list[int] = []
    for i, entry in enumerate(entries):
        if (not isinstance(entry, (list, tuple)) or len(entry) < 2 or not _number(entry[0])
                or not isinstance(entry[1], int) or isinstance(entry[1], bool)
                or entry[1] < 0 or not math.isfinite(entry[0]) or entry[0] > 1e-4):
            raise _malformed(url, f"output_token_logprobs[{i}] is {entry!r}; expected "
                                  "[finite logprob <= 0, token_id, text]")
        logprobs.append(min(float(entry[0]), 0.0))  # float rounding may give +1e-7
        token_ids.append(entry[1])
    output_ids = data.get("output_ids", token_ids)
    if output_ids != token_ids:
        raise _malformed(url, "output_ids differ from the token ids in output_token_logprobs")
    completion = meta.get("completion_tokens", len(token_ids))
    if completion != len(token_ids):
        raise _malformed(url, f"completion_tokens is {completion!r} but {len(token_ids)} "
                              "logprobs came back")
    if kind == "stop" and not token_ids:
        raise _malformed(url, "finish_reason stop with no output tokens")
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
        self._headers = auth_header(read_token(self.options.api_key_file,
                                               "--sglang-transport-api-key-file"))
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._next = 0
        self._sticky: collections.OrderedDict[str, str] = collections.OrderedDict()
        #: Engines that take a distributed update without a begin/end session.
        self._sessionless: set[str] = set()

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
                headers=self._headers,
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
        if status == 401:
            raise TransportError(f"{method} {path} returned HTTP 401: the engine wants an API "
                                 "key (--sglang-transport-api-key-file: the file of the "
                                 "engine's --api-key)", url=url)
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

    async def generate_batch(self, requests: Sequence[GenerateRequest], *,
                             return_exceptions: bool = False,
                             ) -> list[GenerateResult | TransportError]:
        """One ``/generate`` call in SGLang's batch form (``input_ids`` a list of lists,
        ``sampling_params`` one object per request, each with its own ``sampling_seed``) to
        one engine, which then sees the whole group together (the embedded engine prefills a
        shared prompt once; SGLang's radix cache shares it). The engine is the sticky one of
        the first request's session, and every session of the batch sticks to it."""
        requests = list(requests)
        if not requests:
            return []
        if len(requests) == 1:
            return await super().generate_batch(requests, return_exceptions=return_exceptions)
        url = self.route(requests[0].session_id)
        for request in requests[1:]:
            if request.session_id is not None:
                self._sticky[request.session_id] = url
                self._sticky.move_to_end(request.session_id)
        payloads = [generate_payload(r) for r in requests]
        body = {"input_ids": [p["input_ids"] for p in payloads],
                "sampling_params": [p["sampling_params"] for p in payloads],
                "return_logprob": True}
        key = requests[0].session_id
        try:
            data = await self._request("POST", url, "/generate", payload=body,
                                       headers={ROUTING_KEY_HEADER: key} if key else None,
                                       timeout=self.options.timeout)
            if not isinstance(data, list) or len(data) != len(requests):
                raise TransportError(f"malformed /generate response: expected a list of "
                                     f"{len(requests)} results for the batch, got "
                                     f"{_describe(data)}", url=url)
        except TransportError as exc:
            if not return_exceptions:
                raise
            return [exc] * len(requests)
        results: list[GenerateResult | TransportError] = []
        for item in data:
            try:
                results.append(parse_generate_response(item, url))
            except TransportError as exc:
                if not return_exceptions:
                    raise
                results.append(exc)
        return results

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

    supports_partial_rollouts = True

    async def abort_all(self) -> None:
        """Abort every request of every engine (``/abort_request`` with ``abort_all``); each
        comes back aborted, with what it had generated.

        A weight update that aborts (``abort_running``) sends this first, then the plain
        update, rather than SGLang's ``abort_all_requests`` field: with the field, SGLang
        0.5.23 on CPU answered 1 update in 6 with HTTP 400 "the cache was not flushed
        because requests are still running" (the aborted requests were not cleared yet);
        aborting first, 6 in 6 succeeded.
        """
        await asyncio.gather(*(
            self._request("POST", url, "/abort_request", payload={"abort_all": True},
                          timeout=self.options.control_timeout, retry=False)
            for url in self.urls))

    async def update_weights(self, model_dir: str, weight_version: int, *,
                             abort_running: bool = False) -> None:
        payload = {"model_path": str(model_dir), "weight_version": str(weight_version)}
        if abort_running:
            await self.abort_all()

        async def one(url: str) -> None:
            reply = await self._request("POST", url, "/update_weights_from_disk",
                                        payload=payload, timeout=self.options.update_timeout)
            if not isinstance(reply, dict) or reply.get("success") is not True:
                raise TransportError(f"weight update from {model_dir} failed: {reply!r}", url=url)

        await asyncio.gather(*(one(u) for u in self.urls))
        versions = await self.weight_versions()
        stale = {u: v for u, v in versions.items() if v != weight_version}
        if stale:
            raise TransportError(f"after the weight update to version {weight_version}, engines "
                                 f"still report {stale}", url=next(iter(stale)))

    # ------------------------------------------------------------------ distributed update

    supports_distributed_weight_sync = True

    async def _control(self, url: str, path: str, payload: Any, timeout: float,
                       what: str) -> str:
        """POST one weight-sync control call; its message, or TransportError naming ``url``."""
        try:
            reply = await self._request("POST", url, path, payload=payload, timeout=timeout,
                                        retry=False)
        except TransportError as exc:
            raise TransportError(f"{what} failed: {str(exc).removesuffix(f' [engine {url}]')}",
                                 url=url) from exc
        if not isinstance(reply, dict) or reply.get("success") is not True:
            message = reply.get("message") if isinstance(reply, dict) else reply
            raise TransportError(f"{what} failed: {message}", url=url)
        return str(reply.get("message", ""))

    async def weight_group_ranks(self) -> dict[str, int]:
        async def one(url: str) -> int:
            info: Any = None
            # /server_info in SGLang 0.5.23 (/get_server_info is its deprecated alias)
            for path in ("/server_info", "/get_server_info"):
                try:
                    info = await self._request("GET", url, path, retry=False,
                                               timeout=self.options.control_timeout)
                    break
                except TransportError:
                    continue
            info = info if isinstance(info, dict) else {}
            # SGLang 0.5.23 takes an update only inside /begin_weight_update ...
            # /end_weight_update; an engine that says it does not need that saves two calls
            if info.get("weight_update_session_required") is False:
                self._sessionless.add(url)
            else:
                self._sessionless.discard(url)
            size = info.get("tp_size", 1)
            return size if isinstance(size, int) and size > 0 else 1

        return dict(zip(self.urls, await asyncio.gather(*(one(u) for u in self.urls))))

    async def init_weights_update_group(self, *, master_address: str, master_port: int,
                                        rank_offsets: Mapping[str, int], world_size: int,
                                        group_name: str, backend: str,
                                        timeout: float) -> None:
        async def one(url: str) -> None:
            body = {"master_address": master_address, "master_port": master_port,
                    "rank_offset": rank_offsets[url], "world_size": world_size,
                    "group_name": group_name, "backend": backend}
            await self._control(url, "/init_weights_update_group", body, timeout,
                                f"joining weight update group {group_name!r} (rank "
                                f"{rank_offsets[url]} of {world_size}, rendezvous "
                                f"{master_address}:{master_port})")

        await asyncio.gather(*(one(u) for u in self.urls))

    async def update_weights_from_distributed(self, buckets: Sequence[Sequence[Any]],
                                              weight_version: int, *, group_name: str,
                                              timeout: float, abort_running: bool = False,
                                              ) -> None:
        from rollyard.weight_transfer import update_body

        if abort_running:
            await self.abort_all()

        async def one(url: str) -> None:
            session = url not in self._sessionless
            end = ("/end_weight_update", {}, timeout, "closing the weight-update session")
            if session:
                await self._control(url, "/begin_weight_update", {}, timeout,
                                    "opening a weight-update session")
            try:
                for i, bucket in enumerate(buckets):
                    last = i == len(buckets) - 1
                    body = update_body(bucket, group_name=group_name, flush_cache=last,
                                       weight_version=str(weight_version) if last else None)
                    await self._control(url, "/update_weights_from_distributed", body, timeout,
                                        f"in-memory weight update to version {weight_version} "
                                        f"(bucket {i + 1} of {len(buckets)})")
            except BaseException:
                if session:
                    with contextlib.suppress(TransportError):
                        await self._control(url, *end)
                raise
            if session:
                await self._control(url, *end)

        # a successful last bucket set the version (SGLang sets it only on success), so
        # unlike the disk update no /get_model_info round trip follows
        await asyncio.gather(*(one(u) for u in self.urls))

    async def destroy_weights_update_group(self, group_name: str) -> dict[str, bool]:
        async def one(url: str) -> bool:
            try:
                await self._control(url, "/destroy_weights_update_group",
                                    {"group_name": group_name}, self.options.control_timeout,
                                    "leaving the weight update group")
                return True
            except TransportError:
                return False

        return dict(zip(self.urls, await asyncio.gather(*(one(u) for u in self.urls))))

    async def close(self) -> None:
        if (self._session is not None and not self._session.closed
                and self._session_loop is asyncio.get_running_loop()):
            await self._session.close()
        self._session = None


def _describe(data: Any) -> str:
    if isinstance(data, list):
        return f"a list of {len(data)}"
    return type(data).__name__


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
