"""The translation between vLLM's generate payload and rollyard's token API, both ways."""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rollyard import GenerateRequest, GenerateResult, SamplingParams
from rollyard.models.tiny import VOCAB_SIZE
from rollyard.testing import ScriptedTransport
from rollyard_verifiers.bridge import Bridge, BridgeServer
from rollyard_verifiers.translate import (
    BridgeError,
    EngineResultError,
    build_choice,
    translate_request,
)
from vf_helpers import RENDERER_BODY


def test_renderer_request_becomes_exactly_this_rollyard_request() -> None:
    request = translate_request(RENDERER_BODY, session_id="trace-1")
    assert request == GenerateRequest(
        input_ids=[1, 87, 85, 266, 201],
        sampling=SamplingParams(max_new_tokens=16, temperature=0.7, top_p=0.9, top_k=-1,
                                stop_token_ids=[2], seed=11),
        session_id="trace-1")


def test_defaults_and_clamp_to_the_context_left() -> None:
    body = {"token_ids": [5] * 10, "sampling_params": {"max_tokens": 100}}
    assert translate_request(body, max_model_len=30).sampling == SamplingParams(
        max_new_tokens=20, temperature=1.0, top_p=1.0, top_k=-1, stop_token_ids=[], seed=None)
    unbounded = {"token_ids": [5] * 10, "sampling_params": {}}
    assert translate_request(unbounded, max_model_len=30).sampling.max_new_tokens == 20
    assert translate_request(body, max_model_len=200).sampling.max_new_tokens == 100


def test_min_tokens_becomes_min_new_tokens() -> None:
    body = {"token_ids": [5] * 10, "sampling_params": {"max_tokens": 100, "min_tokens": 7}}
    assert translate_request(body).sampling.min_new_tokens == 7
    # clamped with max_tokens when the context leaves less room than min_tokens
    assert translate_request(body, max_model_len=14).sampling.min_new_tokens == 4
    assert translate_request({"token_ids": [5], "sampling_params": {"max_tokens": 3}}
                             ).sampling.min_new_tokens == 0


@pytest.mark.parametrize(("body", "message"), [
    ({**RENDERER_BODY, "features": {"mm_hashes": []}}, "'features': multimodal"),
    ({**RENDERER_BODY, "content_parts": []}, "'content_parts': multimodal"),
    ({**RENDERER_BODY, "stream": True}, "request field 'stream' is not supported"),
    ({"token_ids": [], "sampling_params": {"max_tokens": 1}}, "'token_ids' is empty"),
    ({"token_ids": [1, -2], "sampling_params": {"max_tokens": 1}}, r"token_ids\[1\]=-2"),
    ({"token_ids": "1 2", "sampling_params": {}}, "token_ids must be a list"),
    ({"token_ids": [1], "sampling_params": {"max_tokens": 1, "n": 2}}, "n=2 is not supported"),
    ({"token_ids": [1], "sampling_params": {"max_tokens": 1, "min_tokens": 4}},
     r"min_tokens=4 must be <= max_tokens \(1\)"),
    ({"token_ids": [1], "sampling_params": {"max_tokens": 5, "min_tokens": -1}},
     "min_tokens=-1 must be"),
    ({"token_ids": [1], "sampling_params": {"max_tokens": 1, "logprobs": 5}}, "logprobs=5"),
    ({"token_ids": [1], "sampling_params": {"max_tokens": 1, "best_of": 3}},
     "sampling_params.best_of is not supported"),
    ({"token_ids": [1], "sampling_params": {"max_tokens": 0}}, "max_tokens=0 must be"),
    ({"token_ids": [1], "sampling_params": {"max_tokens": 1, "temperature": "hot"}},
     "temperature='hot' must be a float"),
    ({"token_ids": [1], "sampling_params": {}}, "max_tokens is missing"),
])
def test_requests_the_bridge_cannot_carry_are_refused_by_name(body: dict, message: str) -> None:
    with pytest.raises(BridgeError, match=message):
        translate_request(body)


def test_a_prompt_that_fills_the_context_is_refused() -> None:
    with pytest.raises(BridgeError, match="prompt has 8 tokens; the engine's context of 8"):
        translate_request({"token_ids": [1] * 8, "sampling_params": {"max_tokens": 4}},
                          max_model_len=8)


def test_result_becomes_exactly_this_choice() -> None:
    result = GenerateResult(output_ids=[17, 4, 2], logprobs=[-0.25, -3.5, -0.0],
                            finish_reason="length", weight_version=3)
    assert build_choice(result) == {
        "index": 0, "token_ids": [17, 4, 2],
        "logprobs": {"content": [{"token": "token_id:17", "logprob": -0.25},
                                 {"token": "token_id:4", "logprob": -3.5},
                                 {"token": "token_id:2", "logprob": -0.0}]},
        "finish_reason": "length"}


@pytest.mark.parametrize(("result", "message"), [
    (GenerateResult([1, 2], [-0.1], "stop"), "2 output ids but 1 logprobs"),
    (GenerateResult([1], [-0.1, -0.2], "stop"), "1 output ids but 2 logprobs"),
    (GenerateResult([1], [math.nan], "stop"), "not finite"),
    (GenerateResult([1], [-math.inf], "stop"), "not finite"),
    (GenerateResult([1], [-0.1], "abort"), "neither 'stop' nor 'length'"),  # type: ignore[arg-type]
])
def test_results_renderers_would_reject_are_errors(result: GenerateResult, message: str) -> None:
    with pytest.raises(EngineResultError, match=message):
        build_choice(result)

FIXTURES_OK = [HealthCheck.function_scoped_fixture]  # the renderer fixture is session-wide


def _through_renderers(renderer, ids: list[int], logprobs: list[float]) -> dict:
    """Run ``renderers.client.generate`` (what verifiers' train client calls) with an OpenAI
    client against the bridge's HTTP face, the engine answering ``ids``/``logprobs``."""
    from openai import AsyncOpenAI
    from renderers.client import generate

    async def main() -> dict:
        transport = ScriptedTransport([GenerateResult(ids, logprobs, "stop")])
        async with BridgeServer(Bridge(transport, model="tiny", max_model_len=512)) as server:
            client = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
            try:
                return await generate(client=client, renderer=renderer, model="tiny",
                                      messages=[{"role": "user", "content": "hi"}],
                                      sampling_params={"max_tokens": 8})
            finally:
                await client.close()

    return asyncio.run(main())


@settings(max_examples=60, deadline=None, suppress_health_check=FIXTURES_OK)
@given(data=st.data())
def test_equal_lengths_are_accepted_by_the_installed_renderers_parser(renderer, data) -> None:
    size = data.draw(st.integers(0, 12))
    ids = data.draw(st.lists(st.integers(0, VOCAB_SIZE - 1), min_size=size,
                             max_size=size))
    logprobs = data.draw(st.lists(st.floats(-1e3, 0.0, allow_nan=False), min_size=size,
                                  max_size=size))
    parsed = _through_renderers(renderer, ids, logprobs)
    assert parsed["completion_ids"] == ids
    assert parsed["completion_logprobs"] == logprobs
    assert parsed["finish_reason"] in ("stop", "tool_calls")


@settings(max_examples=30, deadline=None, suppress_health_check=FIXTURES_OK)
@given(ids=st.lists(st.integers(0, 200), max_size=8),
       logprobs=st.lists(st.floats(-50, 0.0), max_size=8))
def test_unequal_lengths_raise_instead_of_truncating(renderer, ids, logprobs) -> None:
    if len(ids) == len(logprobs):
        logprobs = [*logprobs, -1.0]
    from openai import APIStatusError

    with pytest.raises(APIStatusError, match="refusing to truncate") as refused:
        _through_renderers(renderer, ids, logprobs)
    assert refused.value.status_code == 502  # the bridge's answer to an unusable result
