"""The ``sglang`` transport on its own: routing, failures, malformed answers, timeouts."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from rollyard import EngineAborted, GenerateRequest, GenerateResult, SamplingParams, TransportError
from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine
from rollyard_plugins.embedded_engine.process import free_port
from rollyard_plugins.sglang_transport import SGLangTransport, parse_generate_response

PROMPT = [1, 282, 201, 398, 428]


def test_round_robin_and_sticky_sessions() -> None:
    transport = SGLangTransport(["http://a:1", "http://b:2/", "http://c:3"])
    assert [transport.route(None) for _ in range(4)] == [
        "http://a:1", "http://b:2", "http://c:3", "http://a:1"]
    first = transport.route("episode-7")
    assert [transport.route("episode-7") for _ in range(5)] == [first] * 5
    assert transport.route("episode-8") != first


def test_urls_are_checked() -> None:
    with pytest.raises(TransportError, match="at least one"):
        SGLangTransport([])
    with pytest.raises(TransportError, match="localhost:30000"):
        SGLangTransport(["localhost:30000"])


def test_connection_refused_names_the_engine_after_bounded_retries() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    async def go() -> None:
        transport = SGLangTransport([url], {"retries": 2})
        try:
            await transport.generate(GenerateRequest(PROMPT))
        finally:
            await transport.close()

    started = time.monotonic()
    with pytest.raises(TransportError, match=f"after 3 attempts.*engine {url}"):
        asyncio.run(go())
    assert time.monotonic() - started < 10


async def _serve(handler, coro_factory):
    """Run ``coro_factory(url)`` against a one-route aiohttp server answering /generate."""
    app = web.Application()
    app.router.add_route("*", "/generate", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        return await coro_factory(f"http://127.0.0.1:{port}")
    finally:
        await runner.cleanup()


async def _until_running(url: str) -> None:
    """Return as soon as the engine at ``url`` is generating something."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        for _ in range(3000):
            async with session.get(url + "/get_server_info") as response:
                if (await response.json())["running"]:
                    return
            await asyncio.sleep(0.005)
    raise AssertionError("the request never started")


async def _generate_once(url: str, **options) -> GenerateResult:
    transport = SGLangTransport([url], options)
    try:
        return await transport.generate(GenerateRequest(PROMPT))
    finally:
        await transport.close()


@pytest.mark.parametrize("status, body, message", [
    (200, "not json at all", "malformed"),
    (200, '{"text": "hi"}', "meta_info"),
    (500, "Internal Server Error", "HTTP 500"),
    (400, '{"error": {"message": "input_ids[0] is -1"}}', r"HTTP 400: input_ids\[0\] is -1"),
    (200, '{"output_ids": [1], "meta_info": {"finish_reason": {"type": "length"}, '
          '"output_token_logprobs": [[-0.5, 1, null]], "completion_tokens": 2}}',
     "completion_tokens"),
])
def test_bad_answers_raise_transport_error_naming_the_engine(status, body, message) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, text=body)

    with pytest.raises(TransportError, match=message) as info:
        asyncio.run(_serve(handler, _generate_once))
    assert "engine http://127.0.0.1:" in str(info.value)


def test_a_silent_engine_times_out_instead_of_hanging() -> None:
    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(3)
        return web.Response(text="{}")

    async def timed(url: str) -> tuple[Exception | None, float]:
        started = time.monotonic()
        try:
            await _generate_once(url, timeout=0.5)
        except TransportError as exc:
            return exc, time.monotonic() - started
        return None, time.monotonic() - started

    error, elapsed = asyncio.run(_serve(handler, timed))
    assert error is not None and "timed out" in str(error)
    assert elapsed < 2.5


def test_abort_finish_reason_raises_engine_aborted() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"text": "", "output_ids": [], "meta_info": {
            "finish_reason": {"type": "abort", "message": "Abort before prefill"},
            "output_token_logprobs": []}})

    with pytest.raises(EngineAborted, match="Abort before prefill"):
        asyncio.run(_serve(handler, _generate_once))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=20)
ENTRY = st.one_of(JSON, st.tuples(st.floats(), st.integers(), st.none()).map(list))
NEAR_VALID = st.fixed_dictionaries({
    "output_ids": st.lists(st.integers(-2, 600), max_size=4) | JSON,
    "meta_info": st.fixed_dictionaries({
        "finish_reason": st.sampled_from([{"type": "stop"}, {"type": "length"}, {"type": "x"},
                                          "stop", None, {"type": "abort"}]) | JSON,
        "output_token_logprobs": st.lists(ENTRY, max_size=4) | JSON,
        "completion_tokens": st.integers(0, 4) | JSON,
        "weight_version": st.sampled_from(["default", "3", 4, "v2", None]) | JSON,
    }),
})


@settings(max_examples=300, deadline=None)
@given(st.one_of(JSON, NEAR_VALID))
def test_malformed_responses_never_crash_the_transport(data) -> None:
    try:
        result = parse_generate_response(data, "http://engine:1")
    except TransportError as exc:
        assert "http://engine:1" in str(exc)
        return
    assert len(result.output_ids) == len(result.logprobs)
    assert result.finish_reason in ("stop", "length")
    assert all(lp <= 1e-4 for lp in result.logprobs)


@pytest.mark.slow
def test_engine_killed_mid_request_raises_transport_error(tiny_model_dir, tmp_path) -> None:
    handle = EmbeddedEngine({"threads": 1, "log_dir": str(tmp_path)}).launch(
        str(tiny_model_dir), 0)
    long = GenerateRequest(PROMPT, SamplingParams(max_new_tokens=500, temperature=0.0))

    async def go() -> None:
        transport = SGLangTransport([handle.url], {"retries": 1, "timeout": 60})
        try:
            pending = asyncio.ensure_future(transport.generate(long))
            await _until_running(handle.url)
            os.killpg(handle.process.pid, signal.SIGKILL)
            await pending
        finally:
            await transport.close()

    try:
        started = time.monotonic()
        with pytest.raises(TransportError, match=handle.url):
            asyncio.run(go())
        assert time.monotonic() - started < 20
    finally:
        handle.stop()


def test_engine_error_text_reaches_the_caller(embedded_engine) -> None:
    request = GenerateRequest([1, 2, 99999], SamplingParams(max_new_tokens=2))

    async def go() -> None:
        transport = SGLangTransport([embedded_engine.url])
        try:
            await transport.generate(request)
        finally:
            await transport.close()

    with pytest.raises(TransportError, match=r"HTTP 400: input_ids\[2\] is 99999, outside"):
        asyncio.run(go())


def test_abort_request_on_the_engine_raises_engine_aborted(embedded_engine) -> None:
    import aiohttp

    long = GenerateRequest(PROMPT, SamplingParams(max_new_tokens=490, temperature=0.0))

    async def go() -> None:
        transport = SGLangTransport([embedded_engine.url])
        try:
            pending = asyncio.ensure_future(transport.generate(long))
            await _until_running(embedded_engine.url)
            async with aiohttp.ClientSession() as session:
                await session.post(embedded_engine.url + "/abort_request",
                                   json={"abort_all": True})
            await pending
        finally:
            await transport.close()

    with pytest.raises(EngineAborted, match="abort"):
        asyncio.run(go())


def test_min_new_tokens_reaches_the_engine(embedded_engine) -> None:
    def greedy(**sampling) -> GenerateResult:
        request = GenerateRequest(PROMPT, SamplingParams(temperature=0.0, **sampling))

        async def go() -> GenerateResult:
            transport = SGLangTransport([embedded_engine.url])
            try:
                return await transport.generate(request)
            finally:
                await transport.close()

        return asyncio.run(go())

    first = greedy(max_new_tokens=1).output_ids[0]
    assert greedy(max_new_tokens=5, stop_token_ids=[first]).output_ids == [first]
    held = greedy(max_new_tokens=5, stop_token_ids=[first], min_new_tokens=4)
    assert len(held.output_ids) >= 4 and first not in held.output_ids[:4]


def test_one_transport_serves_successive_event_loops(embedded_engine) -> None:
    transport = SGLangTransport([embedded_engine.url])
    request = GenerateRequest(PROMPT, SamplingParams(max_new_tokens=2, seed=1))
    first = asyncio.run(transport.generate(request))
    second = asyncio.run(transport.generate(request))
    asyncio.run(transport.close())
    asyncio.run(transport.close())
    assert first.output_ids == second.output_ids


def test_a_client_that_hangs_up_frees_its_slot(embedded_engine, http) -> None:
    import aiohttp

    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}

    async def give_up() -> None:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(asyncio.TimeoutError):
                await session.post(embedded_engine.url + "/generate", json=body,
                                   timeout=aiohttp.ClientTimeout(total=0.05))

    _, before = http(embedded_engine.url, "/get_server_info")
    asyncio.run(give_up())
    deadline = time.monotonic() + 30
    while http(embedded_engine.url, "/get_server_info")[1]["running"]:
        assert time.monotonic() < deadline, "the abandoned request kept running"
        time.sleep(0.05)
    _, after = http(embedded_engine.url, "/get_server_info")
    assert after["generated_tokens"] - before["generated_tokens"] < 500


def test_health_reports_a_dead_engine_without_retrying(embedded_engine) -> None:
    dead = f"http://127.0.0.1:{free_port()}"

    async def go() -> dict[str, bool]:
        transport = SGLangTransport([embedded_engine.url, dead], {"retries": 50})
        try:
            return await transport.health()
        finally:
            await transport.close()

    started = time.monotonic()
    assert asyncio.run(go()) == {embedded_engine.url: True, dead: False}
    assert time.monotonic() - started < 5
