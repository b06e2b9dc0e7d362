"""Build a megatron-core ``GPTModel`` (local layer spec) that mirrors a Hugging Face model.

Supported: dense Llama and Qwen3 (RMSNorm, SwiGLU, RoPE without scaling, no linear biases;
Qwen3's per-head q/k RMSNorm). Everything else is refused with a ConfigError that names the
config field, before any process is started.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rollyard.errors import ConfigError
from rollyard.training.convert import ModelShape

if TYPE_CHECKING:
    from rollyard.training.batching import MicroBatch

SUPPORTED_MODEL_TYPES = ("llama", "qwen3")


def _rope_theta(config: dict[str, Any]) -> float:
    params = config.get("rope_parameters") or {}
    scaling = config.get("rope_scaling") or {}
    rope_type = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type")
    if rope_type not in (None, "default"):
        raise ConfigError(f"config.json: rope type {rope_type!r} is not supported by the "
                          "Megatron trainer (only plain RoPE)")
    return float(params.get("rope_theta") or config.get("rope_theta") or 10000.0)


def check_hf_config(config: dict[str, Any], where: str) -> ModelShape:
    """The model's shape, or a ConfigError naming the unsupported field of ``where``."""
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(f"{where}: model_type {model_type!r} is not supported by the Megatron "
                          f"trainer; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    if config.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{where}: hidden_act {config['hidden_act']!r} is not supported "
                          "(only silu / SwiGLU)")
    for flag in ("attention_bias", "mlp_bias"):
        if config.get(flag):
            raise ConfigError(f"{where}: {flag}=true is not supported by the Megatron trainer")
    _rope_theta(config)
    return ModelShape.from_hf_config(config)


def check_tensor_parallel(shape: ModelShape, tp: int, where: str) -> None:
    """ConfigError unless ``tp`` splits heads, key/value heads, FFN and vocabulary evenly."""
    sizes = {"num_attention_heads": shape.num_heads, "num_key_value_heads": shape.num_kv_heads,
             "intermediate_size": shape.ffn_hidden_size, "vocab_size": shape.vocab_size}
    for name, size in sizes.items():
        if size % tp:
            raise ConfigError(f"tensor parallel size {tp} does not divide {name}={size} of "
                              f"{where}; choose a --train-tp that divides it")


def transformer_config(config: dict[str, Any], tp: int) -> Any:
    """The megatron-core ``TransformerConfig`` for an HF config (fp32, no dropout, no fusions)."""
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    shape = ModelShape.from_hf_config(config)
    return TransformerConfig(
        num_layers=shape.num_layers, hidden_size=shape.hidden_size,
        num_attention_heads=shape.num_heads, num_query_groups=shape.num_kv_heads,
        kv_channels=shape.head_dim, ffn_hidden_size=shape.ffn_hidden_size,
        normalization="RMSNorm", layernorm_epsilon=float(config.get("rms_norm_eps", 1e-6)),
        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
        qk_layernorm=shape.qk_norm, tensor_model_parallel_size=tp,
        params_dtype=torch.float32, use_cpu_initialization=True,
        hidden_dropout=0.0, attention_dropout=0.0,
        bias_activation_fusion=False, masked_softmax_fusion=False, apply_rope_fusion=False,
        bias_dropout_fusion=False, gradient_accumulation_fusion=False, persist_layer_norm=False,
    )


def build_gpt_model(config: dict[str, Any], tp: int) -> Any:
    """A ``GPTModel`` with the local layer spec; returns full-vocabulary logits [b, s, V].

    ``parallel_output=False`` gathers the vocabulary shards so the loss can use plain
    ``log_softmax`` (which also gives the entropy) on every tensor-parallel rank.
    Needs megatron parallel state to be initialised.
    """
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    shape = ModelShape.from_hf_config(config)
    spec = get_gpt_layer_local_spec(qk_layernorm=shape.qk_norm, normalization="RMSNorm")
    return GPTModel(
        transformer_config(config, tp), spec, vocab_size=shape.vocab_size,
        max_sequence_length=int(config.get("max_position_embeddings", 4096)),
        position_embedding_type="rope", rotary_base=_rope_theta(config), rotary_percent=1.0,
        share_embeddings_and_output_weights=shape.tied_embeddings, parallel_output=False,
    )


@contextmanager
def scoring(model: Any, batch: MicroBatch) -> Iterator[None]:
    """Within the block, ``model`` (a ``GPTModel`` built here) reads ``batch``'s rows and
    returns logits only for the positions that predict response tokens, in the batch's
    per-sample layout: [n, t, V].

    Two forward hooks, so no Megatron code is patched: the output layer gets the hidden states
    of the scored positions only, and, when rows are shared by several samples, the rotary
    embedding follows the batch's position ids (Megatron numbers every row 0..s-1).
    """
    rows, positions = batch.score_rows, batch.score_positions

    def scored_only(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        hidden = args[0]  # [s, r, h]
        return (hidden[positions, rows].transpose(0, 1), *args[1:]), kwargs  # [t, n, h]

    def at_positions(_module: Any, _args: tuple, embedding: Any) -> Any:
        return embedding[batch.position_ids.T, 0, 0].unsqueeze(2)  # [s, 1, 1, d] -> [s, r, 1, d]

    handles = [model.output_layer.register_forward_pre_hook(scored_only, with_kwargs=True)]
    if batch.attention_mask is not None:
        handles.append(model.rotary_pos_emb.register_forward_hook(at_positions))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
