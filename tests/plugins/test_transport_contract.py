"""The transport contract: what every SGLang-protocol engine must do for the ``sglang``
transport. Runs against the embedded engine in ``make test`` and against real SGLang in
``make test-sglang`` (see conftest.contract_engine)."""

from __future__ import annotations

import asyncio
import math

import pytest
from rollyard import GenerateRequest, SamplingParams, TransportError
from rollyard_plugins.sglang_transport import SGLangTransport

PROMPT = [1, 282, 201, 398, 428, 347, 485, 2, 201, 1, 280, 201]  # ChatML "user: hello world"


def generate(url: str, *requests: GenerateRequest) -> list:
    async def go() -> list:
        transport = SGLangTransport([url])
        try:
            return await asyncio.gather(*(transport.generate(r) for r in requests))
        finally:
            await transport.close()

    return asyncio.run(go())


#: Logprobs agree with a teacher-forced float32 pass to this (SGLang 0.5.23 on CPU: ~5e-7).
TOLERANCE = 1e-4


def test_generate_returns_one_logprob_per_token(contract_engine) -> None:
    sampling = SamplingParams(max_new_tokens=8, temperature=1.0, seed=1)
    (result,) = generate(contract_engine.url, GenerateRequest(PROMPT, sampling))
    assert 1 <= len(result.output_ids) <= 8
    assert len(result.logprobs) == len(result.output_ids)
    assert all(math.isfinite(lp) and lp <= 0 for lp in result.logprobs)
    assert result.finish_reason in ("stop", "length")
    if result.finish_reason == "length":
        assert len(result.output_ids) == 8


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, -1, 1.0), (0.7, 20, 0.9),
                                                       (0.0, -1, 1.0)])
def test_logprobs_equal_a_teacher_forced_pass(contract_engine, teacher_forced, temperature,
                                              top_k, top_p) -> None:
    sampling = SamplingParams(max_new_tokens=12, temperature=temperature, top_k=top_k,
                              top_p=top_p, seed=7)
    (result,) = generate(contract_engine.url, GenerateRequest(PROMPT, sampling))
    expected = teacher_forced(contract_engine.model_dir, PROMPT, result.output_ids, temperature)
    assert result.logprobs == pytest.approx(expected, abs=TOLERANCE)


def test_a_seed_repeats_its_sample(contract_engine) -> None:
    if not contract_engine.honours_seed:
        pytest.skip(f"{contract_engine.kind} was started without seeded sampling")
    def request(seed: int) -> GenerateRequest:
        return GenerateRequest(PROMPT, SamplingParams(max_new_tokens=10, seed=seed))

    first, again, other = generate(contract_engine.url, request(3), request(3), request(4))
    assert first.output_ids == again.output_ids
    assert first.output_ids != other.output_ids


def test_stop_token_ends_the_response_and_is_kept(contract_engine) -> None:
    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    (probe,) = generate(contract_engine.url, GenerateRequest(PROMPT, greedy))
    stop = probe.output_ids[1]
    stopping = SamplingParams(max_new_tokens=4, temperature=0.0, stop_token_ids=[stop])
    (result,) = generate(contract_engine.url, GenerateRequest(PROMPT, stopping))
    assert result.output_ids == probe.output_ids[:2]
    assert result.finish_reason == "stop"
    assert len(result.logprobs) == 2


def test_concurrent_requests_each_get_their_own_answer(contract_engine) -> None:
    requests = [GenerateRequest(PROMPT[: 3 + i % 9],
                                SamplingParams(max_new_tokens=6, temperature=0.0))
                for i in range(24)]
    together = generate(contract_engine.url, *requests)
    alone = [generate(contract_engine.url, r)[0] for r in requests[:4]]
    assert [r.output_ids for r in together[:4]] == [r.output_ids for r in alone]
    assert all(len(r.logprobs) == len(r.output_ids) for r in together)


def test_health_and_weight_versions_name_every_engine(contract_engine) -> None:
    async def go() -> tuple[dict, dict]:
        transport = SGLangTransport([contract_engine.url])
        try:
            return await transport.health(), await transport.weight_versions()
        finally:
            await transport.close()

    health, versions = asyncio.run(go())
    assert health == {contract_engine.url: True}
    assert list(versions) == [contract_engine.url]
    assert isinstance(versions[contract_engine.url], int)


def test_prompt_longer_than_the_context_is_refused(contract_engine) -> None:
    request = GenerateRequest([5] * 600, SamplingParams(max_new_tokens=4))
    with pytest.raises(TransportError, match=contract_engine.url):
        generate(contract_engine.url, request)


def test_update_weights_serves_the_new_version(contract_engine, other_model_dir,
                                               teacher_forced) -> None:
    sampling = SamplingParams(max_new_tokens=6, seed=5)

    async def go() -> tuple:
        transport = SGLangTransport([contract_engine.url])
        try:
            await transport.update_weights(str(other_model_dir), 7)
            try:
                versions = await transport.weight_versions()
                result = await transport.generate(GenerateRequest(PROMPT, sampling))
            finally:  # the engine may be the session's shared one: base weights, version 0
                await transport.update_weights(str(contract_engine.model_dir), 0)
            return versions, result
        finally:
            await transport.close()

    versions, result = asyncio.run(go())
    assert versions == {contract_engine.url: 7}
    assert result.weight_version == 7
    expected = teacher_forced(other_model_dir, PROMPT, result.output_ids, 1.0)
    assert result.logprobs == pytest.approx(expected, abs=TOLERANCE)
