"""Bad input to the embedded engine: HTTP 400 naming the field, before any generation."""

from __future__ import annotations

import re

import pytest
from rollyard import EngineStartError
from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine

OK = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}}


@pytest.mark.parametrize("body, field", [
    ({**OK, "sampling_params": {"max_new_tokens": 0}}, "sampling_params.max_new_tokens"),
    ({**OK, "sampling_params": {"max_new_tokens": -3}}, "sampling_params.max_new_tokens"),
    ({**OK, "sampling_params": {"max_new_tokens": 2.5}}, "sampling_params.max_new_tokens"),
    ({**OK, "sampling_params": {"max_new_tokens": 2, "temprature": 1}},
     "sampling_params.temprature"),
    ({**OK, "sampling_params": {"max_new_tokens": 2, "repetition_penalty": 1.3}},
     "sampling_params.repetition_penalty"),
    ({**OK, "sampling_params": {"max_new_tokens": 2, "top_p": 0}}, "sampling_params.top_p"),
    ({**OK, "sampling_params": {"max_new_tokens": 2, "min_new_tokens": 3}},
     "sampling_params.min_new_tokens"),
    ({**OK, "sampling_params": {"max_new_tokens": 2, "min_new_tokens": -1}},
     "sampling_params.min_new_tokens"),
    ({**OK, "sampling_params": {"max_new_tokens": 2, "top_k": 0}}, "sampling_params.top_k"),
    ({**OK, "sampling_params": {"max_new_tokens": 2, "temperature": -1}},
     "sampling_params.temperature"),
    ({**OK, "sampling_params": {"max_new_tokens": 2, "stop_token_ids": ["a"]}},
     "sampling_params.stop_token_ids"),
    ({**OK, "sampling_params": {"max_new_tokens": 2, "sampling_seed": "x"}},
     "sampling_params.sampling_seed"),
    ({**OK, "input_ids": [1, "2", 3]}, r"input_ids\[1\]"),
    ({**OK, "input_ids": [1, 2.0, 3]}, r"input_ids\[1\]"),
    ({**OK, "input_ids": [1, True]}, r"input_ids\[1\]"),
    ({**OK, "input_ids": [1, 512]}, r"input_ids\[1\] is 512, outside the vocabulary"),
    ({**OK, "input_ids": [-1]}, r"input_ids\[0\] is -1"),
    ({**OK, "input_ids": []}, "input_ids must be a non-empty list"),
    ({**OK, "input_ids": [[1, 2], [3, 999]]}, r"input_ids\[1\]\[1\] is 999"),
    ({**OK, "input_ids": [7] * 600}, "context length"),
    ({**OK, "sampling_params": {"max_new_tokens": 500}, "input_ids": [7] * 20},
     "context length"),
    ({**OK, "image_data": "x.png"}, "image_data"),
    ({"sampling_params": {"max_new_tokens": 2}}, "input_ids and text"),
    ({**OK, "stream": True}, "stream"),
    ({**OK, "top_logprobs_num": 5}, "top_logprobs_num"),
    ([1, 2, 3], "JSON object"),
    ("{not json", "not valid JSON"),
])
def test_bad_generate_requests_get_400_naming_the_field(embedded_engine, http, body,
                                                        field) -> None:
    status, reply = http(embedded_engine.url, "/generate", body)
    assert status == 400
    assert re.search(field, reply["error"]["message"]), reply


def test_engine_still_serves_after_bad_requests(embedded_engine, http) -> None:
    http(embedded_engine.url, "/generate", {**OK, "input_ids": ["bad"]})
    status, reply = http(embedded_engine.url, "/generate", OK)
    assert status == 200
    assert reply["meta_info"]["completion_tokens"] >= 1


@pytest.mark.parametrize("body, message", [
    ({}, "model_path"),
    ({"model_path": "/nonexistent/model", "weight_version": "3"}, "/nonexistent/model"),
    ({"model_path": ".", "abort_all_requests": "yes"}, "abort_all_requests"),
])
def test_bad_weight_updates_are_refused_and_keep_the_version(embedded_engine, http, body,
                                                             message) -> None:
    _, before = http(embedded_engine.url, "/get_model_info")
    status, reply = http(embedded_engine.url, "/update_weights_from_disk", body)
    assert status == 400
    assert message in str(reply)
    _, after = http(embedded_engine.url, "/get_model_info")
    assert after["weight_version"] == before["weight_version"]


def test_weights_of_another_architecture_are_refused(embedded_engine, http, tmp_path) -> None:
    from rollyard.models.tiny import build_tiny_model

    llama = build_tiny_model(tmp_path / "llama", arch="llama")
    status, reply = http(embedded_engine.url, "/update_weights_from_disk",
                         {"model_path": str(llama), "weight_version": "9"})
    assert status == 400
    assert "does not match the served model" in reply["message"]


def test_a_model_folder_without_config_fails_to_start_with_the_log(tmp_path) -> None:
    engine = EmbeddedEngine({"log_dir": str(tmp_path), "startup_timeout": 60})
    with pytest.raises(EngineStartError, match=r"exited with status 2(.|\n)*no config\.json"):
        engine.launch(str(tmp_path / "missing"), 0)
