"""The embedded engine: batching, exact logprobs under batching, weight updates, CLI."""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import pathlib
import sys
import time

import pytest
from rollyard_plugins.embedded_engine.process import free_port, launch_server

PROMPT = [1, 282, 201, 398, 428, 347, 485, 2, 201, 1, 280, 201]


def _generate(http, url: str, prompt: list[int], headers: dict | None = None,
              **sampling) -> dict:
    status, reply = http(url, "/generate", {"input_ids": prompt, "return_logprob": True,
                                            "sampling_params": sampling}, headers=headers)
    assert status == 200, reply
    return reply


def _concurrently(calls) -> list:
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(lambda call: call(), calls))


def _wait_until_running(http, url: str, headers: dict | None = None) -> None:
    deadline = time.monotonic() + 30
    while http(url, "/get_server_info", headers=headers)[1]["running"] == 0:
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.01)


def test_response_has_sglang_fields(embedded_engine, http) -> None:
    reply = _generate(http, embedded_engine.url, PROMPT, max_new_tokens=5, ignore_eos=True)
    meta = reply["meta_info"]
    assert set(reply) == {"text", "output_ids", "meta_info"}
    assert meta["finish_reason"] == {"type": "length", "length": 5}
    assert meta["prompt_tokens"] == len(PROMPT)
    assert meta["completion_tokens"] == 5
    assert [entry[1] for entry in meta["output_token_logprobs"]] == reply["output_ids"]
    assert all(entry[2] is None for entry in meta["output_token_logprobs"])
    assert isinstance(meta["weight_version"], str)


def test_text_and_batch_inputs(embedded_engine, http) -> None:
    status, single = http(embedded_engine.url, "/generate",
                          {"text": "hello", "sampling_params": {"max_new_tokens": 3}})
    assert status == 200 and single["meta_info"]["prompt_tokens"] >= 1
    status, batch = http(embedded_engine.url, "/generate", {
        "input_ids": [PROMPT, PROMPT[:4]], "rid": "pair",
        "sampling_params": {"max_new_tokens": 3, "temperature": 0}})
    assert status == 200
    assert [r["meta_info"]["id"] for r in batch] == ["pair_0", "pair_1"]
    assert [r["meta_info"]["prompt_tokens"] for r in batch] == [len(PROMPT), 4]


def test_concurrent_requests_share_decode_steps(embedded_engine, http) -> None:
    _, before = http(embedded_engine.url, "/get_server_info")
    calls = [lambda i=i: _generate(http, embedded_engine.url, PROMPT[: 2 + i % 10],
                                   max_new_tokens=48, ignore_eos=True, sampling_seed=i)
             for i in range(32)]
    replies = _concurrently(calls)
    _, after = http(embedded_engine.url, "/get_server_info")
    tokens = after["generated_tokens"] - before["generated_tokens"]
    steps = after["decode_steps"] - before["decode_steps"]
    assert tokens == 32 * 48 == sum(len(r["output_ids"]) for r in replies)
    assert steps <= tokens / 4, f"{steps} decode steps for {tokens} tokens: not batched"
    assert after["max_running"] > 1


def test_logprobs_stay_exact_inside_a_mixed_batch(embedded_engine, http, tiny_model_dir,
                                                  teacher_forced) -> None:
    settings = [dict(temperature=t, top_k=k, top_p=p, sampling_seed=s, max_new_tokens=10 + s)
                for s, (t, k, p) in enumerate([(1.0, -1, 1.0), (0.5, 5, 1.0), (1.3, -1, 0.8),
                                               (0.0, -1, 1.0), (0.9, 40, 0.95)] * 3)]
    prompts = [PROMPT[: 3 + i] for i in range(len(settings))]
    replies = _concurrently([lambda p=p, s=s: _generate(http, embedded_engine.url, p, **s)
                             for p, s in zip(prompts, settings)])
    for prompt, setting, reply in zip(prompts, settings, replies):
        got = [entry[0] for entry in reply["meta_info"]["output_token_logprobs"]]
        expected = teacher_forced(tiny_model_dir, prompt, reply["output_ids"],
                                  setting["temperature"])
        assert got == pytest.approx(expected, abs=1e-4)


def test_min_new_tokens_suppresses_stop_tokens_and_renormalises(embedded_engine, http,
                                                                 tiny_model_dir,
                                                                 teacher_forced) -> None:
    url = embedded_engine.url
    first = _generate(http, url, PROMPT, max_new_tokens=1, temperature=0)["output_ids"][0]
    # ignore_eos: only the stop token is masked, so the renormalisation below is exact
    early = _generate(http, url, PROMPT, max_new_tokens=6, temperature=0, stop_token_ids=[first],
                      ignore_eos=True)
    assert early["output_ids"] == [first]
    assert early["meta_info"]["finish_reason"] == {"type": "stop", "matched": first}
    held = _generate(http, url, PROMPT, max_new_tokens=6, temperature=0, ignore_eos=True,
                     stop_token_ids=[first], min_new_tokens=3)
    output = held["output_ids"]
    assert len(output) >= 3 and first not in output[:3]
    # SGLang's logprob under min_new_tokens: the stop token's mass is removed before the
    # log_softmax, so the second-best token's logprob is renormalised over what may be drawn.
    [p_stop] = teacher_forced(tiny_model_dir, PROMPT, [first], 1.0)
    [p_next] = teacher_forced(tiny_model_dir, PROMPT, output[:1], 1.0)
    got = held["meta_info"]["output_token_logprobs"][0][0]
    assert got == pytest.approx(p_next - math.log1p(-math.exp(p_stop)), abs=1e-4)


def test_min_new_tokens_masks_only_the_stops_of_rows_still_short() -> None:
    import torch
    from rollyard_plugins.embedded_engine.sampling import SamplingOptions
    from rollyard_plugins.embedded_engine.scheduler import Scheduler, Sequence

    def seq(output: list[int], **options) -> Sequence:
        return Sequence("r", [1], SamplingOptions(**options), lambda s: None, output=output)

    batch = [seq([], min_new_tokens=2, stop_token_ids=frozenset({3})),
             seq([5, 6], min_new_tokens=2, stop_token_ids=frozenset({3})),
             seq([5], min_new_tokens=2, ignore_eos=True, stop_token_ids=frozenset({4})),
             seq([])]
    logits = Scheduler._suppress_early_stops(batch, torch.zeros(4, 6), frozenset({2}))
    masked = [sorted(torch.nonzero(row.isinf()).flatten().tolist()) for row in logits]
    assert masked == [[2, 3], [], [4], []]


def test_top_k_one_is_greedy(embedded_engine, http) -> None:
    greedy = _generate(http, embedded_engine.url, PROMPT, max_new_tokens=8, temperature=0)
    top1 = _generate(http, embedded_engine.url, PROMPT, max_new_tokens=8, top_k=1,
                     sampling_seed=3)
    assert greedy["output_ids"] == top1["output_ids"]


def test_weight_update_waits_for_running_requests(embedded_engine, http, tiny_model_dir,
                                                  other_model_dir, teacher_forced) -> None:
    url = embedded_engine.url
    _, info = http(url, "/get_model_info")
    old_version = info["weight_version"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(_generate, http, url, PROMPT, max_new_tokens=450,
                              ignore_eos=True, temperature=0)
        _wait_until_running(http, url)
        status, update = http(url, "/update_weights_from_disk",
                              {"model_path": str(other_model_dir), "weight_version": "21"})
        long_reply = running.result()
    try:
        assert status == 200 and update["success"] is True
        assert long_reply["meta_info"]["weight_version"] == old_version
        got = [e[0] for e in long_reply["meta_info"]["output_token_logprobs"]]
        assert got == pytest.approx(teacher_forced(tiny_model_dir, PROMPT,
                                                   long_reply["output_ids"], 0.0), abs=1e-4)
        after = _generate(http, url, PROMPT, max_new_tokens=4)
        assert after["meta_info"]["weight_version"] == "21"
        got = [e[0] for e in after["meta_info"]["output_token_logprobs"]]
        assert got == pytest.approx(teacher_forced(other_model_dir, PROMPT,
                                                   after["output_ids"], 1.0), abs=1e-4)
    finally:  # the engine is shared by the session: give back the base weights and version
        http(url, "/update_weights_from_disk",
             {"model_path": str(tiny_model_dir), "weight_version": "0"})


@pytest.mark.slow
def test_rollyard_engine_serve_with_the_abort_policy_behind_an_api_key(
        tiny_model_dir, other_model_dir, http, tmp_path) -> None:
    from rollyard import GenerateRequest, SamplingParams, TransportError
    from rollyard_plugins.sglang_transport import SGLangTransport

    key_file = tmp_path / "engine.key"
    key_file.write_text("s3cret\n")
    port = free_port()
    rollyard = pathlib.Path(sys.executable).with_name("rollyard")
    handle = launch_server(
        [str(rollyard), "engine", "serve", "--model", str(tiny_model_dir), "--port", str(port),
         "--threads", "1", "--weight-update-policy", "abort", "--api-key-file", str(key_file)],
        f"http://127.0.0.1:{port}", name="cli", timeout=120, log_dir=str(tmp_path))
    key = {"Authorization": "Bearer s3cret"}
    try:
        assert http(handle.url, "/generate", {"input_ids": PROMPT})[0] == 401
        assert http(handle.url, "/get_server_info", headers={"Authorization": "Bearer x"}
                    )[0] == 401
        assert http(handle.url, "/health")[0] == 200  # probes need no key, as in SGLang

        async def through_transport(options: dict) -> list[int]:
            transport = SGLangTransport([handle.url], options)
            try:
                result = await transport.generate(GenerateRequest(
                    PROMPT, SamplingParams(max_new_tokens=2)))
            finally:
                await transport.close()
            return result.output_ids
        assert 1 <= len(asyncio.run(through_transport({"api_key_file": str(key_file)}))) <= 2
        with pytest.raises(TransportError, match=r"401.*--sglang-transport-api-key-file"):
            asyncio.run(through_transport({}))

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            running = pool.submit(_generate, http, handle.url, PROMPT, max_new_tokens=400,
                                  ignore_eos=True, temperature=0, headers=key)
            _wait_until_running(http, handle.url, headers=key)
            status, update = http(handle.url, "/update_weights_from_disk",
                                  {"model_path": str(other_model_dir), "weight_version": "2"},
                                  headers=key)
            aborted = running.result()
        assert status == 200 and update["success"] is True
        assert aborted["meta_info"]["finish_reason"]["type"] == "abort"
        assert len(aborted["output_ids"]) < 400
        after = _generate(http, handle.url, PROMPT, max_new_tokens=2, headers=key)
        assert after["meta_info"]["weight_version"] == "2"
    finally:
        handle.stop()
    assert not handle.alive


def test_free_ports_lie_below_the_ephemeral_range(tmp_path, monkeypatch) -> None:
    import socket

    from rollyard_plugins.embedded_engine import process

    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    monkeypatch.setattr(process, "EPHEMERAL_RANGE_FILE", ranges)
    ports = {free_port() for _ in range(20)}
    assert all(process.LOWEST_SERVER_PORT <= port < 32768 for port in ports)
    assert len(ports) > 1  # chosen at random, so that two runs rarely race for one
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports.pop()))

    ranges.write_text(f"{process.LOWEST_SERVER_PORT}\t60999\n")  # no room below: the kernel's
    assert process.LOWEST_SERVER_PORT <= free_port() <= 60999
