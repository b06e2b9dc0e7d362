"""Fixtures for the inference layer: a tiny model (built once) and running engines.

The transport contract tests run against ``contract_engine``: the embedded engine by default,
or an already running SGLang server when ``ROLLYARD_TEST_ENGINE_URL`` (and
``ROLLYARD_TEST_MODEL_DIR``, the model it serves) are set, as ``make test-sglang`` does.
"""

from __future__ import annotations

import json
import os
import pathlib
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The same architecture with different weights (seed 1): a weight update's target."""
    from rollyard.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3-seed1"), arch="qwen3", seed=1)


HttpJson = Callable[..., tuple[int, Any]]


@pytest.fixture(scope="session")
def http() -> HttpJson:
    """``http(url, path, body=None, timeout=60, headers=None) -> (status, decoded JSON or
    text)``; POSTs when a body is given (a str is sent as is), GETs otherwise."""

    def call(url: str, path: str, body: Any = None, timeout: float = 60,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        request = urllib.request.Request(url + path, data=None if data is None else data.encode(),
                                         headers={"Content-Type": "application/json",
                                                  **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                status, raw = response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read().decode()
        try:
            return status, json.loads(raw)
        except json.JSONDecodeError:
            return status, raw

    return call


TeacherForced = Callable[[pathlib.Path, list[int], list[int], float], list[float]]


@pytest.fixture(scope="session")
def teacher_forced() -> TeacherForced:
    """``f(model_dir, prompt, output, temperature)``: the logprob of each output token under
    one forward pass over prompt + output, by the engine protocol's definition
    (log_softmax of logits / temperature; temperature 0 counts as 1)."""
    import torch
    from transformers import AutoModelForCausalLM

    models: dict[pathlib.Path, Any] = {}

    def logprobs(model_dir: pathlib.Path, prompt: list[int], output: list[int],
                 temperature: float = 1.0) -> list[float]:
        if model_dir not in models:
            models[model_dir] = AutoModelForCausalLM.from_pretrained(
                model_dir, dtype=torch.float32).eval()
        with torch.no_grad():
            logits = models[model_dir](torch.tensor([prompt + output])).logits[0]
        scaled = logits[len(prompt) - 1:-1] / (temperature if temperature >= 1e-6 else 1.0)
        table = torch.log_softmax(scaled, dim=-1)
        return table[torch.arange(len(output)), torch.tensor(output)].tolist()

    return logprobs


@dataclass
class ContractEngine:
    """An engine the transport contract runs against, and the model folder it serves."""

    url: str
    model_dir: pathlib.Path
    kind: str
    #: Whether equal ``sampling_seed`` gives equal samples (SGLang: only with
    #: --enable-deterministic-inference, i.e. ROLLYARD_TEST_ENGINE_SEEDED=1).
    honours_seed: bool = True


@pytest.fixture(scope="session")
def contract_engine(request: pytest.FixtureRequest) -> ContractEngine:
    """The embedded engine, or the SGLang server named by ``ROLLYARD_TEST_ENGINE_URL``."""
    url = os.environ.get("ROLLYARD_TEST_ENGINE_URL")
    if url:
        model_dir = os.environ.get("ROLLYARD_TEST_MODEL_DIR")
        if not model_dir:
            raise pytest.UsageError("ROLLYARD_TEST_ENGINE_URL needs ROLLYARD_TEST_MODEL_DIR")
        return ContractEngine(url.rstrip("/"), pathlib.Path(model_dir), "sglang",
                              honours_seed=os.environ.get("ROLLYARD_TEST_ENGINE_SEEDED") == "1")
    handle = request.getfixturevalue("embedded_engine")
    return ContractEngine(handle.url, request.getfixturevalue("tiny_model_dir"), "embedded")
