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


# --------------------------------------------------------------------------- batched generation


def generate_batch(url: str, requests: list[GenerateRequest], **kwargs) -> list:
    async def go() -> list:
        transport = SGLangTransport([url])
        try:
            return await transport.generate_batch(requests, **kwargs)
        finally:
            await transport.close()

    return asyncio.run(go())


def test_a_batch_answers_each_request_in_order_with_its_own_seed(contract_engine,
                                                                 teacher_forced) -> None:
    group = [GenerateRequest(PROMPT, SamplingParams(max_new_tokens=8, seed=100 + i),
                             session_id=f"g/{i}") for i in range(6)]
    batch = generate_batch(contract_engine.url, group)
    assert len(batch) == 6
    for result in batch:
        assert len(result.logprobs) == len(result.output_ids) >= 1
        expected = teacher_forced(contract_engine.model_dir, PROMPT, result.output_ids, 1.0)
        assert result.logprobs == pytest.approx(expected, abs=TOLERANCE)
    if contract_engine.honours_seed:
        alone = generate(contract_engine.url, *group[:3])
        assert [r.output_ids for r in batch[:3]] == [r.output_ids for r in alone]
        assert len({tuple(r.output_ids) for r in batch}) > 1  # distinct seeds, distinct samples


def test_a_batch_of_different_prompts_equals_single_requests(contract_engine) -> None:
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    requests = [GenerateRequest(PROMPT[: 4 + i], greedy) for i in range(5)]
    batch = generate_batch(contract_engine.url, requests)
    alone = generate(contract_engine.url, *requests)
    assert [r.output_ids for r in batch] == [r.output_ids for r in alone]


def test_a_failed_batch_gives_each_request_the_error(contract_engine) -> None:
    requests = [GenerateRequest(PROMPT, SamplingParams(max_new_tokens=4)),
                GenerateRequest([5] * 600, SamplingParams(max_new_tokens=4))]
    results = generate_batch(contract_engine.url, requests, return_exceptions=True)
    assert len(results) == 2
    assert all(isinstance(r, TransportError) and contract_engine.url in str(r) for r in results)
    with pytest.raises(TransportError, match=contract_engine.url):
        generate_batch(contract_engine.url, requests)


# --------------------------------------------------------------------------- distributed update


class RankZero:
    """The test process as the trainer's rank 0 of a weight-update group (gloo)."""

    def __init__(self, world_size: int = 2, timeout_s: float = 60) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from rollyard_plugins.embedded_engine.process import free_port

        self.port, self.world_size, self.timeout_s = free_port(), world_size, timeout_s
        self.name = f"contract-{self.port}"
        self.pool = ThreadPoolExecutor(1)
        self.pg = None

    def open(self):
        from rollyard.weight_transfer import init_process_group

        def join() -> None:
            self.pg = init_process_group(backend="gloo", master_address="127.0.0.1",
                                         master_port=self.port, world_size=self.world_size,
                                         rank=0, group_name=self.name,
                                         timeout_s=self.timeout_s)

        return self.pool.submit(join)

    def send(self, tensors: list):
        import torch.distributed as dist
        from rollyard.weight_transfer import pack

        return self.pool.submit(dist.broadcast, pack(tensors), group_src=0, group=self.pg)

    def close(self) -> None:
        from rollyard.weight_transfer import destroy_process_group

        if self.pg is not None:
            destroy_process_group(self.pg)
        self.pool.shutdown()


def _checkpoint(model_dir) -> dict:
    from safetensors.torch import load_file

    return load_file(str(model_dir / "model.safetensors"))


def test_update_weights_from_distributed_serves_the_broadcast_weights(
        contract_engine, other_model_dir, teacher_forced) -> None:
    """The test process plays the trainer's rank 0: it hosts the group, the engine joins, and
    the tensors it broadcasts are what the engine serves next, under the new version."""
    from rollyard.weight_transfer import TensorSpec, dtype_name

    state = _checkpoint(other_model_dir)
    specs = [TensorSpec(name, dtype_name(t.dtype), tuple(t.shape)) for name, t in state.items()]
    sampling = SamplingParams(max_new_tokens=6, seed=5)
    rank0 = RankZero()
    url = contract_engine.url

    async def go() -> tuple:
        transport = SGLangTransport([url])
        try:
            assert (await transport.weight_group_ranks()) == {url: 1}
            joined = rank0.open()
            await transport.init_weights_update_group(
                master_address="127.0.0.1", master_port=rank0.port, rank_offsets={url: 1},
                world_size=2, group_name=rank0.name, backend="gloo", timeout=60)
            joined.result(timeout=60)
            sent = rank0.send([state[s.name] for s in specs])
            try:
                await transport.update_weights_from_distributed([specs], 11,
                                                                group_name=rank0.name,
                                                                timeout=60)
                sent.result(timeout=60)
                versions = await transport.weight_versions()
                result = await transport.generate(GenerateRequest(PROMPT, sampling))
            finally:  # the engine may be the session's shared one: base weights, version 0
                await transport.update_weights(str(contract_engine.model_dir), 0)
            left = await transport.destroy_weights_update_group(rank0.name)
            return versions, result, left
        finally:
            await transport.close()
            rank0.close()

    versions, result, left = asyncio.run(go())
    assert versions == {url: 11}
    assert result.weight_version == 11
    expected = teacher_forced(other_model_dir, PROMPT, result.output_ids, 1.0)
    assert result.logprobs == pytest.approx(expected, abs=TOLERANCE)
    assert left == {url: True}


def test_an_update_group_that_cannot_form_names_the_engine(contract_engine) -> None:
    """A world size the engines cannot fill: the join fails within the timeout and the error
    names the engine, instead of hanging."""
    import time

    url = contract_engine.url
    rank0 = RankZero(world_size=3, timeout_s=3)  # nobody plays rank 2

    async def go() -> None:
        transport = SGLangTransport([url])
        try:
            rank0.open()
            await transport.init_weights_update_group(
                master_address="127.0.0.1", master_port=rank0.port, rank_offsets={url: 1},
                world_size=3, group_name=rank0.name, backend="gloo", timeout=20)
        finally:
            await transport.close()

    started = time.monotonic()
    with pytest.raises(TransportError, match=url):
        asyncio.run(go())
    rank0.close()
    assert time.monotonic() - started < 30
