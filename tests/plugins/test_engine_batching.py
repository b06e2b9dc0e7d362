"""The embedded engine and SGLang's batch form of /generate: a group's shared prompt is
prefilled once, ``n`` parallel samples, and groups larger than the engine's batch."""

from __future__ import annotations

import pytest

PROMPT = [1, 282, 201, 398, 428, 347, 485, 2, 201, 1, 280, 201]


def _stats(http, url: str) -> dict:
    status, info = http(url, "/get_server_info")
    assert status == 200
    return info


def test_a_group_sharing_its_prompt_is_prefilled_once(embedded_engine, http, tiny_model_dir,
                                                      teacher_forced) -> None:
    url = embedded_engine.url
    before = _stats(http, url)
    status, batch = http(url, "/generate", {
        "input_ids": [PROMPT] * 8, "return_logprob": True,
        "sampling_params": [{"max_new_tokens": 6, "sampling_seed": 40 + i} for i in range(8)]})
    assert status == 200 and len(batch) == 8
    after = _stats(http, url)
    assert after["prefill_passes"] - before["prefill_passes"] == 1
    assert after["shared_prefills"] - before["shared_prefills"] == 7
    for reply in batch:
        output = reply["output_ids"]
        logprobs = [entry[0] for entry in reply["meta_info"]["output_token_logprobs"]]
        assert logprobs == pytest.approx(teacher_forced(tiny_model_dir, PROMPT, output, 1.0),
                                         abs=1e-4)
    # each request kept its own seed: the same seed alone gives the same sample
    status, alone = http(url, "/generate", {
        "input_ids": PROMPT, "sampling_params": {"max_new_tokens": 6, "sampling_seed": 43}})
    assert alone["output_ids"] == batch[3]["output_ids"]
    assert len({tuple(r["output_ids"]) for r in batch}) > 1


def test_n_gives_parallel_samples_prompt_after_prompt(embedded_engine, http) -> None:
    status, batch = http(embedded_engine.url, "/generate", {
        "input_ids": [PROMPT, PROMPT[:5]], "rid": "par",
        "sampling_params": {"max_new_tokens": 3, "n": 3}})
    assert status == 200
    assert [r["meta_info"]["prompt_tokens"] for r in batch] == [len(PROMPT)] * 3 + [5] * 3
    status, single = http(embedded_engine.url, "/generate", {
        "input_ids": PROMPT, "sampling_params": {"max_new_tokens": 3, "n": 2}})
    assert status == 200 and isinstance(single, list) and len(single) == 2


@pytest.mark.parametrize("body, message", [
    ({"input_ids": [PROMPT, PROMPT], "sampling_params": [{"max_new_tokens": 2}]},
     "sampling_params has 1 entries for 2 prompts"),
    ({"input_ids": PROMPT, "sampling_params": [{"max_new_tokens": 2}]},
     "a list only goes with a batch"),
    ({"input_ids": [PROMPT, PROMPT], "sampling_params": [{"n": 2}, {"n": 3}]},
     "same n"),
    ({"input_ids": [PROMPT, PROMPT], "sampling_params": [{}, {"temperature": -1}]},
     "sampling_params[1]: sampling_params.temperature"),
    ({"input_ids": PROMPT, "sampling_params": {"n": 0}}, "n must be a positive integer"),
])
def test_bad_batch_sampling_is_refused_naming_the_entry(embedded_engine, http, body,
                                                        message) -> None:
    status, reply = http(embedded_engine.url, "/generate", body)
    assert status == 400
    assert message in reply["error"]["message"]


def test_a_group_larger_than_the_batch_fills_each_free_slot_from_the_shared_prompt(
        tiny_model_dir, tmp_path, http, teacher_forced) -> None:
    from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine

    handle = EmbeddedEngine({"max_batch_size": 4, "log_dir": str(tmp_path)}).launch(
        str(tiny_model_dir), 0)
    try:
        status, batch = http(handle.url, "/generate", {
            "input_ids": [PROMPT] * 10, "return_logprob": True,
            "sampling_params": [{"max_new_tokens": 2 + i, "ignore_eos": True,
                                 "sampling_seed": i} for i in range(10)]})
        stats = _stats(http, handle.url)
    finally:
        handle.stop()
    assert status == 200
    assert [r["meta_info"]["completion_tokens"] for r in batch] == [2 + i for i in range(10)]
    assert stats["max_running"] == 4
    # one prefill; every later sequence starts, in the step its slot frees, from a copy
    assert stats["prefill_passes"] == 1 and stats["shared_prefills"] == 9
    # no idle gap: 4 slots busy until the work runs out (65 tokens, the longest 11)
    assert stats["decode_steps"] <= 65 // 4 + 11
    # sequences moved between slots as others finished, their keys and values with them
    for reply in batch:
        logprobs = [entry[0] for entry in reply["meta_info"]["output_token_logprobs"]]
        expected = teacher_forced(tiny_model_dir, PROMPT, reply["output_ids"], 1.0)
        assert logprobs == pytest.approx(expected, abs=1e-4)
