"""Record real SGLang answers as JSON fixtures (``run.sh --record-fixtures``).

tests/plugins/test_engine_sglang_shapes.py replays the same requests against the embedded
engine in the default suite and checks that its answers have SGLang's shapes, so the
embedded engine cannot drift from the protocol without SGLang installed.
"""

from __future__ import annotations

import json
import pathlib
import urllib.error
import urllib.request
from typing import Any

#: ChatML "user: hello world" then the assistant turn, in the tiny tokenizer's ids.
PROMPT = [1, 282, 201, 398, 428, 347, 485, 2, 201, 1, 280, 201]
MODEL_DIR_PLACEHOLDER = "$MODEL_DIR"
# Not recorded: ids outside the vocabulary (SGLang 0.5.23's scheduler dies with an IndexError;
# the embedded engine answers 400) and max_new_tokens 0 (SGLang answers an empty generation;
# the embedded engine refuses it, as rollyard never asks for one).

CASES: dict[str, tuple[str, str, Any]] = {
    "generate_greedy": ("POST", "/generate", {
        "input_ids": PROMPT, "return_logprob": True,
        "sampling_params": {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True}}),
    "generate_sampled": ("POST", "/generate", {
        "input_ids": PROMPT, "return_logprob": True,
        "sampling_params": {"max_new_tokens": 6, "temperature": 0.8, "top_k": 20,
                            "top_p": 0.9, "sampling_seed": 1, "ignore_eos": True}}),
    "generate_transport_payload": ("POST", "/generate", {
        "input_ids": PROMPT, "return_logprob": True,
        "sampling_params": {"max_new_tokens": 5, "temperature": 1.0, "top_p": 1.0,
                            "top_k": -1, "no_stop_trim": True, "skip_special_tokens": False,
                            "sampling_seed": 3}}),
    "generate_too_long": ("POST", "/generate", {
        "input_ids": [7] * 600, "sampling_params": {"max_new_tokens": 4}}),
    "get_model_info": ("GET", "/get_model_info", None),
    "update_weights_from_disk": ("POST", "/update_weights_from_disk", {
        "model_path": MODEL_DIR_PLACEHOLDER, "weight_version": "3"}),
}


def call(url: str, method: str, path: str, body: Any) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, raw = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read().decode()
    try:
        return status, json.loads(raw)
    except json.JSONDecodeError:
        return status, raw


def _substitute(value: Any, model_dir: str) -> Any:
    if isinstance(value, str):
        return value.replace(MODEL_DIR_PLACEHOLDER, model_dir)
    if isinstance(value, dict):
        return {k: _substitute(v, model_dir) for k, v in value.items()}
    return value


def record(url: str, model_dir: pathlib.Path, out: pathlib.Path) -> None:
    """Send every case to the server at ``url`` and write one JSON file per case."""
    out.mkdir(parents=True, exist_ok=True)
    for name, (method, path, body) in CASES.items():
        status, response = call(url, method, path, _substitute(body, str(model_dir)))
        text = json.dumps(response).replace(str(model_dir), MODEL_DIR_PLACEHOLDER)
        fixture = {"method": method, "path": path, "request": body, "status": status,
                   "response": json.loads(text), "server": "sglang==0.5.23 on CPU, float32, "
                   "tiny qwen3 from build_tiny_model(seed=0)"}
        (out / f"{name}.json").write_text(json.dumps(fixture, indent=2) + "\n")
        print(f"recorded {name}: HTTP {status}")
