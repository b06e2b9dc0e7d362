"""The architectures the conformance suite covers: one tiny random Hugging Face model each.

Each entry is the keyword arguments of ``AutoConfig.for_model`` on top of a shared shape
(hidden 64, 2 layers, 4 query heads in 2 key/value groups, vocabulary of the test tokenizer).
The names are the rows of the coverage table in docs/models.md.
"""

from __future__ import annotations

import pathlib
from typing import Any

SHAPE: dict[str, Any] = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "initializer_range": 0.05,
}

#: name -> (model type, config fields beyond SHAPE). Half tie their embeddings.
ARCHITECTURES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", {"tie_word_embeddings": True}),
    "llama-rope-linear": ("llama", {
        "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}}),
    "llama3": ("llama", {
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64}}),
    "llama-rope-yarn": ("llama", {
        "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                            "original_max_position_embeddings": 64}}),
    "qwen2": ("qwen2", {"tie_word_embeddings": True}),
    "qwen3": ("qwen3", {"tie_word_embeddings": False}),
    "mistral": ("mistral", {"sliding_window": 256}),
    # mixtures of experts, 4 experts choosing 2: Qwen3-MoE without renormalising the top-k
    # probabilities (Mixtral always renormalises them)
    "qwen3_moe": ("qwen3_moe", {"tie_word_embeddings": True, "num_experts": 4,
                                "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                                "norm_topk_prob": False}),
    "mixtral": ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}),
}


def model_type(name: str) -> str:
    """The ``model_type`` of architecture ``name``."""
    return ARCHITECTURES[name][0]


def build(out: pathlib.Path, name: str, seed: int = 0) -> pathlib.Path:
    """Write architecture ``name`` as a random HF model folder with the test tokenizer."""
    import torch
    from rollyard.models.tokenizer import train_tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    model_type, fields = ARCHITECTURES[name]
    tokenizer = train_tokenizer(512)
    config = AutoConfig.for_model(
        model_type, vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **SHAPE, **fields)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if model_type == "qwen2":  # transformers initialises biases to zero: make them count
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj,
                             layer.self_attn.v_proj):
                    proj.bias.normal_(0.0, 0.1)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
