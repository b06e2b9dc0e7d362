"""Build a megatron-core ``GPTModel`` (local layer spec) that mirrors a Hugging Face model.

Supported: the dense decoders Llama, Mistral, Qwen2 (Qwen2.5) and Qwen3 (RMSNorm, SwiGLU,
RoPE; Qwen2's q/k/v biases; Qwen3's per-head q/k RMSNorm), the mixtures of experts Qwen3-MoE
and Mixtral (megatron-core's MoE layer: a softmax router choosing the top k experts, each a
SwiGLU MLP; see :func:`moe_settings`), tied or untied embeddings, and the
RoPE types ``default``, ``linear``, ``llama3`` and ``yarn``. The rotary inverse frequencies
of a scaled type are transformers' own (``ROPE_INIT_FUNCTIONS``), installed on Megatron's
rotary module, so both compute the same angles; yarn's attention factor, which scales cos and
sin and hence every query-key product by its square, goes into the softmax scale.

A sliding window (Mistral, Qwen2 with ``use_sliding_window``) is not honoured by the trainer:
a model whose window is shorter than its context (``max_position_embeddings``, the longest
sample a run keeps) is refused. Everything else is refused with a ConfigError that names the
config field, before any process is started.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rollyard.errors import ConfigError
from rollyard.model_facts import context_length
from rollyard.training.convert import MOE_MODEL_TYPES, ModelShape

if TYPE_CHECKING:
    import torch

    from rollyard.training.batching import MicroBatch

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", *MOE_MODEL_TYPES)
ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def rope_parameters(config: dict[str, Any]) -> dict[str, Any]:
    """The RoPE settings of an HF config, as transformers 5 (``rope_parameters``) or 4
    (``rope_theta`` with ``rope_scaling``) writes them; ``rope_type`` always set."""
    params = dict(config.get("rope_scaling") or {})
    params.update(config.get("rope_parameters") or {})
    params["rope_type"] = params.get("rope_type") or params.get("type") or "default"
    params.setdefault("rope_theta", config.get("rope_theta") or 10000.0)
    return params


def sliding_window(config: dict[str, Any]) -> int | None:
    """The attention window of an HF config, None when attention is full."""
    window = config.get("sliding_window")
    if config.get("model_type") in ("mistral", "mixtral") or config.get("use_sliding_window"):
        return window
    return None


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
    rope_type = rope_parameters(config)["rope_type"]
    if rope_type not in ROPE_TYPES:
        raise ConfigError(f"{where}: rope type {rope_type!r} is not supported by the Megatron "
                          f"trainer; supported: {', '.join(ROPE_TYPES)}")
    window, context = sliding_window(config), context_length(config)
    if window is not None and window < context:
        raise ConfigError(f"{where}: sliding_window={window} is shorter than the context "
                          f"(max_position_embeddings={context}); the Megatron trainer "
                          "attends to the whole context, so it would train another model: "
                          f"set sliding_window to null or max_position_embeddings to {window}")
    if model_type in MOE_MODEL_TYPES:
        _check_moe(config, where)
    return ModelShape.from_hf_config(config)


def _check_moe(config: dict[str, Any], where: str) -> None:
    """ConfigError for the mixture-of-experts settings the trainer does not reproduce."""
    if config.get("mlp_only_layers") or config.get("decoder_sparse_step", 1) not in (1, None):
        raise ConfigError(f"{where}: mlp_only_layers / decoder_sparse_step give some layers a "
                          "dense MLP; the Megatron trainer takes models whose every layer is "
                          "a mixture of experts")
    if config.get("router_jitter_noise"):
        raise ConfigError(f"{where}: router_jitter_noise={config['router_jitter_noise']} is not "
                          "supported by the Megatron trainer (set it to 0)")


def moe_settings(config: dict[str, Any], aux_loss_coeff: float = 0.0) -> dict[str, Any]:
    """The ``TransformerConfig`` fields of a mixture-of-experts HF config ({} for dense).

    The routing is transformers': the softmax of the router's logits over every expert, the
    top k kept, renormalised to sum to 1 when ``norm_topk_prob`` (Mixtral always; Qwen3-MoE
    per its config). Renormalised, that is the softmax of the top k logits (megatron-core's
    default); otherwise the softmax comes first (``moe_router_pre_softmax``). The router's
    load-balancing loss is off unless ``aux_loss_coeff`` > 0 (then megatron-core's
    ``aux_loss``). The router's logits are computed in fp32 whatever the training dtype.
    Experts run one after the other (no grouped GEMM) and tokens reach the experts of other
    expert-parallel ranks by all-to-all.
    """
    shape = ModelShape.from_hf_config(config)
    if not shape.num_experts:
        return {}
    normalised = config["model_type"] == "mixtral" or bool(config.get("norm_topk_prob"))
    return {"num_moe_experts": shape.num_experts,
            "moe_router_topk": int(config["num_experts_per_tok"]),
            "moe_ffn_hidden_size": shape.expert_ffn_hidden_size,
            "moe_router_pre_softmax": not normalised, "moe_router_dtype": "fp32",
            "moe_router_load_balancing_type": "aux_loss" if aux_loss_coeff > 0 else "none",
            "moe_aux_loss_coeff": aux_loss_coeff, "moe_grouped_gemm": False,
            "moe_token_dispatcher_type": "alltoall"}


def rope_inv_freq(config: dict[str, Any]) -> tuple[torch.Tensor, float] | None:
    """transformers' rotary inverse frequencies and attention factor for a scaled RoPE type;
    None for ``default`` (Megatron's own equal them)."""
    from transformers import AutoConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope_type = rope_parameters(config)["rope_type"]
    if rope_type == "default":
        return None
    fields = {key: value for key, value in config.items() if key != "model_type"}
    hf_config = AutoConfig.for_model(config["model_type"], **fields)
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](hf_config, "cpu")
    return inv_freq.float(), float(attention_factor)


def check_tensor_parallel(shape: ModelShape, tp: int, where: str, ep: int = 1,
                          dp: int = 1) -> None:
    """ConfigError unless ``tp`` splits heads, key/value heads, FFN and vocabulary evenly
    and ``ep`` splits the experts and the data-parallel ranks."""
    sizes = {"num_attention_heads": shape.num_heads, "num_key_value_heads": shape.num_kv_heads,
             "intermediate_size": shape.ffn_hidden_size, "vocab_size": shape.vocab_size}
    if shape.num_experts:
        sizes["moe_intermediate_size"] = shape.expert_ffn_hidden_size
    for name, size in sizes.items():
        if size % tp:
            raise ConfigError(f"tensor parallel size {tp} does not divide {name}={size} of "
                              f"{where}; choose a --train-tp that divides it")
    if ep == 1:
        return
    if not shape.num_experts:
        raise ConfigError(f"expert parallel size {ep}: {where} is not a mixture of experts; "
                          "leave --train-ep at 1")
    if shape.num_experts % ep:
        raise ConfigError(f"expert parallel size {ep} does not divide the {shape.num_experts} "
                          f"experts of {where}; choose a --train-ep that divides it")
    if tp > 1:
        raise ConfigError(f"--train-ep {ep} with --train-tp {tp}: expert parallelism is "
                          "supported with one tensor-parallel rank only")
    if dp % ep:
        raise ConfigError(f"expert parallel size {ep} does not divide the data-parallel size "
                          f"{dp} (the experts are spread over data-parallel ranks); choose a "
                          "--train-dp that it divides")


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a ``TrainConfig.dtype`` (``fp32`` or ``bf16``)."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16}[name]


def transformer_config(config: dict[str, Any], tp: int, dtype: str = "fp32", ep: int = 1,
                       aux_loss_coeff: float = 0.0) -> Any:
    """The megatron-core ``TransformerConfig`` for an HF config (no dropout, no fusions);
    ``dtype`` bf16 makes the parameters and activations bf16 (softmax and rotary angles stay
    fp32, as megatron-core computes them); ``ep`` and ``aux_loss_coeff``: a mixture of
    experts' expert-parallel size and router loss (:func:`moe_settings`)."""
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_config import TransformerConfig

    shape = ModelShape.from_hf_config(config)
    rope = rope_inv_freq(config)
    return TransformerConfig(
        num_layers=shape.num_layers, hidden_size=shape.hidden_size,
        num_attention_heads=shape.num_heads, num_query_groups=shape.num_kv_heads,
        kv_channels=shape.head_dim, ffn_hidden_size=shape.ffn_hidden_size,
        normalization="RMSNorm", layernorm_epsilon=float(config.get("rms_norm_eps", 1e-6)),
        gated_linear_unit=True, activation_func=F.silu, add_bias_linear=False,
        add_qkv_bias=shape.qkv_bias,
        softmax_scale=None if rope is None else rope[1] ** 2 / shape.head_dim ** 0.5,
        qk_layernorm=shape.qk_norm, tensor_model_parallel_size=tp,
        expert_model_parallel_size=ep, **moe_settings(config, aux_loss_coeff),
        params_dtype=torch_dtype(dtype), bf16=dtype == "bf16",
        attention_softmax_in_fp32=True, use_cpu_initialization=True,
        hidden_dropout=0.0, attention_dropout=0.0,
        bias_activation_fusion=False, masked_softmax_fusion=False, apply_rope_fusion=False,
        bias_dropout_fusion=False, gradient_accumulation_fusion=False, persist_layer_norm=False,
    )


def build_gpt_model(config: dict[str, Any], tp: int, dtype: str = "fp32", ep: int = 1,
                    aux_loss_coeff: float = 0.0) -> Any:
    """A ``GPTModel`` with the local layer spec; returns full-vocabulary logits [b, s, V].

    ``parallel_output=False`` gathers the vocabulary shards so the loss can use plain
    ``log_softmax`` (which also gives the entropy) on every tensor-parallel rank. ``dtype``
    bf16 gives bf16 parameters throughout (logits in bf16; the loss takes them in fp32).
    Needs megatron parallel state to be initialised.
    """
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    shape = ModelShape.from_hf_config(config)
    spec = get_gpt_layer_local_spec(num_experts=shape.num_experts or None,
                                    moe_grouped_gemm=False, qk_layernorm=shape.qk_norm,
                                    normalization="RMSNorm")
    model = GPTModel(
        transformer_config(config, tp, dtype, ep, aux_loss_coeff), spec,
        vocab_size=shape.vocab_size,
        max_sequence_length=context_length(config),
        position_embedding_type="rope",
        rotary_base=float(rope_parameters(config)["rope_theta"]), rotary_percent=1.0,
        share_embeddings_and_output_weights=shape.tied_embeddings, parallel_output=False,
    )
    rope = rope_inv_freq(config)
    if rope is not None:  # transformers' frequencies for a scaled type (module docstring)
        model.rotary_pos_emb.inv_freq = rope[0].to(model.rotary_pos_emb.inv_freq.device)
    if dtype == "bf16":
        # the norms are built in fp32 whatever params_dtype says; megatron's Float16Module
        # casts the whole model, as here (the rotary inverse frequencies, not a buffer, stay)
        model.bfloat16()
    return model


@contextmanager
def scoring(model: Any, batch: MicroBatch) -> Iterator[None]:
    """Within the block, ``model`` (a ``GPTModel`` built here) reads ``batch``'s rows and
    returns logits only for the positions that predict response tokens, in the batch's
    per-sample layout: [n, t, V].

    Forward hooks, so no Megatron code is patched: the output layer gets the hidden states of
    the scored positions only, and, when rows are shared by several samples, the rotary
    embedding follows the batch's position ids (Megatron numbers every row 0..s-1).
    The output layer computes the logits in the per-sample layout [n, t, V] and hands them on
    as a transposed view [t, n, V], so Megatron's closing ``transpose(0, 1).contiguous()``
    copies nothing (the logits are the largest tensor of a step: 240 MB for 8 × 152 tokens
    of a 49k vocabulary).
    """
    rows, positions = batch.score_rows, batch.score_positions

    def scored_only(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        hidden = args[0]  # [s, r, h]
        return (hidden[positions, rows], *args[1:]), kwargs  # [n, t, h]

    def as_sequence_first(_module: Any, _args: tuple, output: tuple) -> tuple:
        logits, bias = output  # [n, t, V]
        return logits.transpose(0, 1), bias  # a view [t, n, V]

    def at_positions(_module: Any, _args: tuple, embedding: Any) -> Any:
        return embedding[batch.position_ids.T, 0, 0].unsqueeze(2)  # [s, 1, 1, d] -> [s, r, 1, d]

    handles = [model.output_layer.register_forward_pre_hook(scored_only, with_kwargs=True),
               model.output_layer.register_forward_hook(as_sequence_first)]
    if batch.attention_mask is not None:
        handles.append(model.rotary_pos_emb.register_forward_hook(at_positions))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
