"""The bridge end to end: renderer request → bridge → ``sglang`` transport → engine, called
directly and over its HTTP face.

The engine is a fake SGLang server here (it records the exact payload it receives); the
real embedded engine is used in test_rollout.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from rollyard import EngineAborted
from rollyard_plugins.sglang_transport import SGLangTransport
from rollyard_verifiers.bridge import Bridge, BridgeServer
from vf_helpers import RENDERER_BODY, FakeSGLang

SGLANG_REPLY = {
    "text": "ignored", "output_ids": [17, 4, 2],
    "meta_info": {"id": "x", "finish_reason": {"type": "length", "length": 3},
                  "prompt_tokens": 5, "completion_tokens": 3, "weight_version": "2",
                  "output_token_logprobs": [[-0.25, 17, None], [-3.5, 4, None], [0.0, 2, None]]},
}


def run_bridged(reply: dict[str, Any], body: Callable[[Bridge, FakeSGLang], Awaitable[Any]],
                status: int = 200) -> tuple[Any, FakeSGLang, Bridge]:
    """Serve ``reply`` from a fake engine, call ``body(bridge, engine)``, return its result."""
    async def main() -> tuple[Any, FakeSGLang, Bridge]:
        async with FakeSGLang(reply, status) as engine:
            transport = SGLangTransport([engine.url], {"retries": 0})
            bridge = Bridge(transport, model="tiny", max_model_len=64)
            try:
                return await body(bridge, engine), engine, bridge
            finally:
                await transport.close()
    return asyncio.run(main())


async def generate(bridge: Bridge, engine: FakeSGLang) -> dict[str, Any]:
    """What the HTTP face does with a request, without the HTTP."""
    return await bridge.generate(RENDERER_BODY, session_id="trace-1")


def test_the_engine_receives_exactly_this_sglang_request() -> None:
    _, engine, _ = run_bridged(SGLANG_REPLY, generate)
    [(path, headers, payload)] = engine.requests
    assert path == "/generate"
    assert payload == {
        "input_ids": [1, 87, 85, 266, 201],
        "sampling_params": {"max_new_tokens": 16, "temperature": 0.7, "top_p": 0.9,
                            "top_k": -1, "no_stop_trim": True, "skip_special_tokens": False,
                            "stop_token_ids": [2], "sampling_seed": 11},
        "return_logprob": True}
    assert headers["X-SMG-Routing-Key"] == "trace-1"  # sticky routing by the trace id


def test_the_renderer_receives_exactly_this_choice() -> None:
    response, _, bridge = run_bridged(SGLANG_REPLY, generate)
    assert response["request_id"].startswith("rollyard-")
    assert response["choices"] == [{
        "index": 0, "token_ids": [17, 4, 2],
        "logprobs": {"content": [{"token": "token_id:17", "logprob": -0.25},
                                 {"token": "token_id:4", "logprob": -3.5},
                                 {"token": "token_id:2", "logprob": 0.0}]},
        "finish_reason": "length"}]
    assert bridge.pop_session("trace-1").weight_versions == [2]
    assert bridge.pop_session("trace-1").weight_versions == []  # popped once


def test_max_tokens_is_clamped_to_the_engine_context() -> None:
    async def body(bridge: Bridge, engine: FakeSGLang) -> None:
        long = {**RENDERER_BODY, "token_ids": [3] * 60}
        await bridge.generate(long)

    _, engine, _ = run_bridged(SGLANG_REPLY, body)
    assert engine.requests[0][2]["sampling_params"]["max_new_tokens"] == 4  # 64 - 60


def test_an_engine_abort_is_raised_and_recorded() -> None:
    aborted = {"meta_info": {"finish_reason": {"type": "abort", "message": "weights updating"},
                             "output_token_logprobs": []}}

    async def body(bridge: Bridge, engine: FakeSGLang) -> None:
        with pytest.raises(EngineAborted, match="weights updating"):
            await generate(bridge, engine)

    _, _, bridge = run_bridged(aborted, body)
    assert "weights updating" in (bridge.pop_session("trace-1").aborted or "")


def http_exchange(reply: dict[str, Any], status: int = 200, body: Any = RENDERER_BODY,
                  path: str = "/inference/v1/generate") -> tuple[int, Any, Bridge]:
    """POST ``body`` to the bridge's HTTP face; return (status, JSON reply, bridge)."""
    import aiohttp

    async def exchange(bridge: Bridge, engine: FakeSGLang) -> tuple[int, Any]:
        async with BridgeServer(bridge) as server, aiohttp.ClientSession() as http:
            base = server.base_url.removesuffix("/v1")
            data = body if isinstance(body, str) else json.dumps(body)
            async with http.post(base + path, data=data,
                                 headers={"X-Session-ID": "trace-9"}) as response:
                return response.status, await response.json()

    (code, payload), _, bridge = run_bridged(reply, exchange, status)
    return code, payload, bridge


def test_http_face_serves_the_same_translation() -> None:
    code, payload, bridge = http_exchange(SGLANG_REPLY)
    assert code == 200
    assert payload["choices"][0]["token_ids"] == [17, 4, 2]
    assert bridge.pop_session("trace-9").weight_versions == [2]


@pytest.mark.parametrize(("reply", "status", "body", "code", "kind", "message"), [
    (SGLANG_REPLY, 200, "{not json", 400, "invalid_request", "not JSON"),
    (SGLANG_REPLY, 200, {**RENDERER_BODY, "features": {}}, 400, "invalid_request",
     "multimodal"),
    ({"meta_info": {"finish_reason": {"type": "abort", "message": "oom"}}}, 200,
     RENDERER_BODY, 503, "engine_aborted", "oom"),
    ({"error": {"message": "engine exploded"}}, 500, RENDERER_BODY, 502, "engine_error",
     "engine exploded"),
])
def test_http_face_errors_name_the_problem(reply, status, body, code, kind, message) -> None:
    got, payload, _ = http_exchange(reply, status, body)
    assert got == code
    assert payload["error"]["type"] == kind
    assert message in payload["error"]["message"]


def test_models_endpoint_reports_the_context_length() -> None:
    import aiohttp

    async def models(bridge: Bridge, engine: FakeSGLang) -> Any:
        async with BridgeServer(bridge) as server, aiohttp.ClientSession() as http:
            async with http.get(server.base_url + "/models") as response:
                return await response.json()

    payload, _, _ = run_bridged(SGLANG_REPLY, models)
    assert payload["data"] == [{"id": "tiny", "object": "model", "max_model_len": 64}]


def test_verifiers_openai_client_and_renderer_through_the_http_face(renderer) -> None:
    """What verifiers 0.4's train client does: an AsyncOpenAI client built from a base URL,
    the renderer rendering the messages and parsing the response."""
    from openai import AsyncOpenAI
    from renderers.client import generate

    async def body(bridge: Bridge, engine: FakeSGLang) -> dict[str, Any]:
        async with BridgeServer(bridge) as server:
            client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
            try:
                return await generate(client=client, renderer=renderer, model="tiny",
                                      messages=[{"role": "user", "content": "2+2?"}],
                                      sampling_params={"max_tokens": 3, "temperature": 1.0},
                                      extra_headers={"X-Session-ID": "trace-5"})
            finally:
                await client.close()

    result, engine, bridge = run_bridged(SGLANG_REPLY, body)
    assert result["completion_ids"] == [17, 4, 2]
    assert result["completion_logprobs"] == [-0.25, -3.5, 0.0]
    assert result["finish_reason"] == "length"
    sent = engine.requests[0][2]
    assert sent["input_ids"] == result["prompt_ids"]
    assert sent["sampling_params"]["stop_token_ids"] == renderer.get_stop_token_ids()
    assert bridge.pop_session("trace-5").weight_versions == [2]
