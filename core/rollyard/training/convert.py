"""Hugging Face decoder parameters (Llama, Mistral, Qwen2, Qwen3; the mixtures of experts
Qwen3-MoE and Mixtral) to and from megatron-core ``GPTModel`` shards.

Megatron fuses what Hugging Face keeps apart and splits what it keeps whole:

* ``linear_qkv`` holds, for every key/value group, that group's query heads, then its key head,
  then its value head; tensor parallelism gives each rank a contiguous run of groups.
* ``linear_fc1`` holds ``[gate; up]`` *per rank*: rank r owns ``[gate_r; up_r]``.
* Column-parallel weights (qkv, fc1, embedding, output layer) split along dim 0, row-parallel
  weights (``linear_proj``, ``linear_fc2``) along dim 1; norms are replicated.
* A mixture-of-experts layer's router (``mlp.router``, HF's ``gate``) is replicated; expert
  ``j`` is ``mlp.experts.local_experts.<j - first>`` on the expert-parallel rank that holds it
  (ranks hold consecutive runs of experts), its ``linear_fc1``/``linear_fc2`` split over the
  tensor-parallel ranks like a dense MLP's. Qwen3-MoE names an expert's projections
  ``mlp.experts.<j>.{gate,up,down}_proj``, Mixtral ``block_sparse_moe.experts.<j>.{w1,w3,w2}``.
  Megatron names gathered from every expert-parallel rank use the global index.

Both directions only slice, concatenate and reshape, so HF -> Megatron -> HF is bit-exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

Tensor = torch.Tensor


@dataclass(frozen=True)
class ModelShape:
    """The sizes conversion needs, read from a Hugging Face ``config.json``."""

    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    tied_embeddings: bool
    qk_norm: bool
    qkv_bias: bool = False
    #: experts per layer (0: a dense MLP), their FFN size, and the HF naming (``model_type``)
    num_experts: int = 0
    expert_ffn_hidden_size: int = 0
    moe_naming: str = ""

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> ModelShape:
        heads = config["num_attention_heads"]
        model_type = config.get("model_type")
        experts = int(config.get("num_experts") or config.get("num_local_experts") or 0) \
            if model_type in MOE_MODEL_TYPES else 0
        return cls(
            num_layers=config["num_hidden_layers"],
            hidden_size=config["hidden_size"],
            num_heads=heads,
            num_kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            ffn_hidden_size=config["intermediate_size"],
            vocab_size=config["vocab_size"],
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            qk_norm=model_type in ("qwen3", "qwen3_moe"),
            qkv_bias=model_type == "qwen2",
            num_experts=experts,
            expert_ffn_hidden_size=int(config.get("moe_intermediate_size")
                                       or config["intermediate_size"]) if experts else 0,
            moe_naming=model_type if experts else "",
        )


#: model types whose MLP is a mixture of experts
MOE_MODEL_TYPES = ("qwen3_moe", "mixtral")
_LAYER = "decoder.layers.{i}."
_HF_LAYER = "model.layers.{i}."
# (megatron suffix, hf suffix, split dim or None when replicated)
_SIMPLE_LAYER_PARAMS = [
    ("input_layernorm.weight", "input_layernorm.weight", None),
    ("pre_mlp_layernorm.weight", "post_attention_layernorm.weight", None),
    ("self_attention.linear_proj.weight", "self_attn.o_proj.weight", 1),
]
#: HF model type -> (the MoE block's name, the expert's gate, up and down projections)
_HF_MOE = {"qwen3_moe": ("mlp", ("gate_proj", "up_proj", "down_proj")),
           "mixtral": ("block_sparse_moe", ("w1", "w3", "w2"))}
_EXPERT = "mlp.experts.local_experts.{j}."
_QK_NORM_PARAMS = [
    ("self_attention.q_layernorm.weight", "self_attn.q_norm.weight", None),
    ("self_attention.k_layernorm.weight", "self_attn.k_norm.weight", None),
]


def _simple_params(shape: ModelShape) -> list[tuple[str, str, int | None]]:
    """Parameters that map one to one (possibly split along a dim)."""
    out: list[tuple[str, str, int | None]] = [
        ("embedding.word_embeddings.weight", "model.embed_tokens.weight", 0),
        ("decoder.final_layernorm.weight", "model.norm.weight", None),
    ]
    if not shape.tied_embeddings:
        out.append(("output_layer.weight", "lm_head.weight", 0))
    layer_params = _SIMPLE_LAYER_PARAMS + (_QK_NORM_PARAMS if shape.qk_norm else [])
    if shape.num_experts:
        layer_params = [*layer_params, ("mlp.router.weight",
                                        f"{_HF_MOE[shape.moe_naming][0]}.gate.weight", None)]
    for i in range(shape.num_layers):
        out += [(_LAYER.format(i=i) + m, _HF_LAYER.format(i=i) + h, d) for m, h, d in layer_params]
    return out


def _hf_expert(shape: ModelShape, i: int, j: int) -> tuple[str, str, str]:
    """The HF names of the gate, up and down weights of expert ``j`` of layer ``i``."""
    block, projections = _HF_MOE[shape.moe_naming]
    prefix = _HF_LAYER.format(i=i) + f"{block}.experts.{j}."
    gate, up, down = (prefix + f"{proj}.weight" for proj in projections)
    return gate, up, down


def _mlps(shape: ModelShape, i: int, ep_rank: int, ep_size: int
          ) -> list[tuple[str, tuple[str, str, str]]]:
    """Layer ``i``'s MLPs on expert-parallel rank ``ep_rank``: each one's Megatron prefix and
    its HF gate, up and down weights (one dense MLP, or the rank's run of experts)."""
    ml, hl = _LAYER.format(i=i), _HF_LAYER.format(i=i)
    if not shape.num_experts:
        return [(ml + "mlp.", tuple(hl + f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")))]
    local = shape.num_experts // ep_size
    return [(ml + _EXPERT.format(j=j), _hf_expert(shape, i, ep_rank * local + j))
            for j in range(local)]


def hf_to_megatron(hf: dict[str, Tensor], shape: ModelShape, tp_rank: int,
                   tp_size: int, ep_rank: int = 0, ep_size: int = 1) -> dict[str, Tensor]:
    """The Megatron parameters of tensor-parallel rank ``tp_rank`` (and expert-parallel rank
    ``ep_rank``, which holds experts by their local index) from a full HF state dict."""
    out: dict[str, Tensor] = {}
    for mname, hname, dim in _simple_params(shape):
        tensor = hf[hname]
        out[mname] = tensor if dim is None else tensor.chunk(tp_size, dim=dim)[tp_rank]
    for i in range(shape.num_layers):
        hl, ml = _HF_LAYER.format(i=i), _LAYER.format(i=i)
        for kind in _qkv_kinds(shape):
            out[ml + f"self_attention.linear_qkv.{kind}"] = _fused_qkv(
                [hf[hl + f"self_attn.{p}_proj.{kind}"] for p in "qkv"], shape, tp_rank, tp_size)
        for prefix, (gate, up, down) in _mlps(shape, i, ep_rank, ep_size):
            out[prefix + "linear_fc1.weight"] = torch.cat(
                [hf[name].chunk(tp_size, dim=0)[tp_rank] for name in (gate, up)], dim=0)
            out[prefix + "linear_fc2.weight"] = hf[down].chunk(tp_size, dim=1)[tp_rank]
    return {name: t.contiguous() for name, t in out.items()}


def global_expert_name(name: str, ep_rank: int, ep_size: int, shape: ModelShape) -> str:
    """A Megatron parameter name with a local expert index made global (others unchanged)."""
    marker = ".local_experts."
    if marker not in name:
        return name
    head, _, rest = name.partition(marker)
    local, _, tail = rest.partition(".")
    return f"{head}{marker}{ep_rank * (shape.num_experts // ep_size) + int(local)}.{tail}"


def _qkv_kinds(shape: ModelShape) -> tuple[str, ...]:
    """The q/k/v tensors of a layer: the weights, and the biases where the model has them."""
    return ("weight", "bias") if shape.qkv_bias else ("weight",)


def _fused_qkv(qkv: list[Tensor], shape: ModelShape, tp_rank: int, tp_size: int) -> Tensor:
    """HF's separate query, key and value weights (or biases) as rank ``tp_rank``'s share of
    Megatron's ``linear_qkv``: per key/value group, its query heads, key head, value head."""
    q_per_group, hd = shape.num_heads // shape.num_kv_heads, shape.head_dim
    rows = [q_per_group * hd, hd, hd]
    blocks = [t.reshape(shape.num_kv_heads, n, *t.shape[1:]) for t, n in zip(qkv, rows)]
    fused = torch.cat(blocks, dim=1).chunk(tp_size, dim=0)[tp_rank]
    return fused.reshape(-1, *fused.shape[2:]).contiguous()


def megatron_to_hf(shards: list[dict[str, Tensor]], shape: ModelShape) -> dict[str, Tensor]:
    """The full HF state dict from the Megatron parameters of every tensor-parallel rank
    (experts by their global index: :func:`global_expert_name`).
    With one rank, a tensor that maps one to one is the parameter itself and gate and up are
    views of ``linear_fc1``: copy before writing, and before the next update."""
    return hf_shaped(megatron_to_hf_blocks(shards, shape))


def hf_shaped(blocks: dict[str, Tensor]) -> dict[str, Tensor]:
    """What :func:`megatron_to_hf_blocks` gives, in the HF tensors' shapes (the query, key
    and value blocks as rows)."""
    return {name: t.flatten(0, 1) if _is_qkv_block(name, t) else t for name, t in blocks.items()}


def _is_qkv_block(name: str, tensor: Tensor) -> bool:
    """Whether ``tensor`` is a query/key/value weight or bias left in its groups' blocks."""
    return tensor.dim() == (3 if name.endswith("weight") else 2)


def megatron_to_hf_blocks(shards: list[dict[str, Tensor]],
                          shape: ModelShape) -> dict[str, Tensor]:
    """:func:`megatron_to_hf`, but the query, key and value weights (biases) are left as their
    key/value groups' blocks, ``[groups, rows per group, hidden]`` (``[groups, rows]``): the
    same elements in the same order as the HF tensor, and with one rank views of
    ``linear_qkv``, so that every tensor is a view of a parameter (a copy of them stays current
    by copying again)."""
    out: dict[str, Tensor] = {}
    for mname, hname, dim in _simple_params(shape):
        out[hname] = _whole([s[mname] for s in shards], dim)
    q_per_group = shape.num_heads // shape.num_kv_heads
    hd = shape.head_dim
    for i in range(shape.num_layers):
        hl, ml = _HF_LAYER.format(i=i), _LAYER.format(i=i)
        for kind in _qkv_kinds(shape):
            qkv = _whole([s[ml + f"self_attention.linear_qkv.{kind}"] for s in shards], 0)
            qkv = qkv.reshape(shape.num_kv_heads, (q_per_group + 2) * hd, *qkv.shape[1:])
            for proj, block in zip("qkv", qkv.split([q_per_group * hd, hd, hd], dim=1)):
                out[hl + f"self_attn.{proj}_proj.{kind}"] = block
        for prefix, (gate, up, down) in _mlps(shape, i, 0, 1):
            gates, ups = zip(*(s[prefix + "linear_fc1.weight"].chunk(2, dim=0) for s in shards))
            out[gate], out[up] = _whole(list(gates), 0), _whole(list(ups), 0)
            out[down] = _whole([s[prefix + "linear_fc2.weight"] for s in shards], 1)
    return out


def _whole(parts: list[Tensor], dim: int | None) -> Tensor:
    """The tensor-parallel ``parts`` of one tensor as one (replicated when ``dim`` is None)."""
    return parts[0] if dim is None or len(parts) == 1 else torch.cat(parts, dim=dim)
