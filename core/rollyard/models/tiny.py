"""Build small Qwen3- or Llama-architecture models from a config, in Hugging Face format.

The result (config.json, float32 model.safetensors, tokenizer files with a ChatML template) is
the exchange format of the whole project: the embedded engine and SGLang serve it and the
trainer converts it. Input and output embeddings are untied so every weight is stored once,
by name. The same ``seed`` always gives the same weights and the same tokenizer. The folder
carries the init-model marker (:mod:`rollyard.models.origin`): runs on it get the from-scratch
defaults.
"""

from __future__ import annotations

import pathlib
from typing import Any

from rollyard.models.origin import write_init_marker
from rollyard.models.tokenizer import train_tokenizer

ARCHITECTURES = ("qwen3", "llama")

#: Shapes by size name. "tiny" trains in minutes on two CPU cores; "small" is for smoke tests
#: of bigger shapes (GQA groups of 2, more layers).
SIZES: dict[str, dict[str, int]] = {
    "tiny": {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "max_position_embeddings": 512},
    "small": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
              "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32,
              "max_position_embeddings": 2048},
}
VOCAB_SIZE = 512


def model_config(arch: str, size: str, vocab_size: int, eos_id: int, pad_id: int) -> Any:
    """The transformers config of a model of ``arch`` and ``size``."""
    from transformers import LlamaConfig, Qwen3Config

    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown arch {arch!r}; expected one of {list(ARCHITECTURES)}")
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; expected one of {list(SIZES)}")
    config_class = {"qwen3": Qwen3Config, "llama": LlamaConfig}[arch]
    return config_class(
        vocab_size=vocab_size, rms_norm_eps=1e-6, rope_theta=10000.0, initializer_range=0.02,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id,
        attention_bias=False, use_cache=True, dtype="float32", **SIZES[size])


def build_tiny_model(out_dir: str | pathlib.Path, arch: str = "qwen3", size: str = "tiny",
                     seed: int = 0) -> pathlib.Path:
    """Write a freshly initialised model and its tokenizer to ``out_dir``; return the path.

    Raises ValueError for an unknown ``arch`` or ``size``.
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.utils import logging as hf_logging

    tokenizer = train_tokenizer(VOCAB_SIZE)
    config = model_config(arch, size, len(tokenizer), tokenizer.eos_token_id,
                          tokenizer.pad_token_id)
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    finally:
        torch.random.set_rng_state(generator_state)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        write_init_marker(out, arch=arch, size=size, seed=seed)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return out
