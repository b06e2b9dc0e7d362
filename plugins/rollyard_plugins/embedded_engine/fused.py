"""The decoder layers of Llama-style models (Llama, Mistral, Qwen2, Qwen3) as a few torch
calls per layer.

On a CPU a small model's decode step is bound by how many operations it issues, not by
arithmetic: transformers' layers spend much of a step in module calls and separate q/k/v and
gate/up projections. This runs the same computation with the query/key/value and gate/up
weights concatenated (one matrix product each), fused RMSNorm and no module dispatch. The
weights are the model's own parameters: the query, key and value (and gate and up) parameters
become views of one concatenated tensor each, so a load that writes the parameters in place
writes the fused weights too (Qwen2's query/key/value biases likewise). The rotary
frequencies and attention scaling are those transformers computed for the model, so the static
RoPE types (default, linear, llama3, yarn) are covered. Models it does not cover (biases
elsewhere, dynamic rotary types, sliding windows shorter than the context, other
architectures) keep transformers' layers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3")
#: Rotary types whose frequencies are fixed when the model is built.
STATIC_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def unsupported(config: Any) -> str | None:
    """Why ``config`` cannot use the fused layers, or None when it can."""
    if config.model_type not in ARCHITECTURES:
        return f"model type {config.model_type!r}"
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        return "biases"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r}"
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") not in STATIC_ROPE_TYPES:
        return f"rope type {rope.get('rope_type')!r}"
    window = getattr(config, "sliding_window", None)
    windowed = config.model_type == "mistral" or getattr(config, "use_sliding_window", False)
    if windowed and window and window < config.max_position_embeddings:
        return "sliding-window attention"
    return None


@dataclass
class _Layer:
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    qkv: torch.Tensor
    qkv_bias: torch.Tensor | None
    out: torch.Tensor
    gate_up: torch.Tensor
    down: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor,
                   bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear`` through oneDNN's matrix product. On these AMD CPUs MKL's fp32 products
    (what ``F.linear`` calls) run without AVX-512: oneDNN's are 1.1-1.3x faster on a
    layer's shapes and 1.6x (one thread) to 2.2x (two) on a 49k-token vocabulary's output
    layer (docs/real-model.md, "Engine throughput on SmolLM2"). The same sums in another
    order: results differ in the last bits only."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _has_onednn_linear() -> bool:
    """Whether this torch build has oneDNN's fp32 linear (checked once, on a tiny input)."""
    try:
        _onednn_linear(torch.zeros(1, 2), torch.zeros(3, 2))
    except (AttributeError, RuntimeError):
        return False
    return True


#: The linear layer the fused decoder runs: oneDNN's where the build has it.
linear = _onednn_linear if _has_onednn_linear() else F.linear


def _concatenate(linears: list[Any], name: str = "weight") -> torch.Tensor:
    """The ``name`` tensors of ``linears`` stacked along dim 0; each becomes a view of it."""
    fused = torch.cat([getattr(linear, name) for linear in linears])
    row = 0
    for linear in linears:
        tensor = getattr(linear, name)
        rows = tensor.shape[0]
        tensor.data = fused[row:row + rows]
        row += rows
    return fused


class FusedDecoder:
    """Runs a transformers Llama-style model's decoder layers (see the module docstring)."""

    def __init__(self, model: Any) -> None:
        config = model.config
        self.model = model
        self.backbone = model.model
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.hidden = config.hidden_size
        self.eps = config.rms_norm_eps
        self.scale = self.head_dim ** -0.5
        self.inv_freq = self.backbone.rotary_emb.inv_freq
        self.attention_scaling = self.backbone.rotary_emb.attention_scaling
        self.layers = [self._fuse(layer) for layer in self.backbone.layers]

    @staticmethod
    @torch.no_grad()
    def _fuse(layer: Any) -> _Layer:
        """One layer's weights, its q/k/v and gate/up parameters rebound to views of their
        concatenation (the values are unchanged)."""
        attn, mlp = layer.self_attn, layer.mlp
        q_norm = getattr(attn, "q_norm", None)
        k_norm = getattr(attn, "k_norm", None)
        return _Layer(
            input_norm=layer.input_layernorm.weight,
            post_norm=layer.post_attention_layernorm.weight,
            qkv=_concatenate([attn.q_proj, attn.k_proj, attn.v_proj]),
            qkv_bias=None if attn.q_proj.bias is None else _concatenate(
                [attn.q_proj, attn.k_proj, attn.v_proj], "bias"),
            out=attn.o_proj.weight,
            gate_up=_concatenate([mlp.gate_proj, mlp.up_proj]), down=mlp.down_proj.weight,
            q_norm=None if q_norm is None else q_norm.weight,
            k_norm=None if k_norm is None else k_norm.weight)

    def _rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of the angles, computed in fp32 and cast to the weights' dtype."""
        freqs = positions[..., None].float() * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        dtype = self.backbone.embed_tokens.weight.dtype
        return ((emb.cos() * self.attention_scaling)[:, None].to(dtype),
                (emb.sin() * self.attention_scaling)[:, None].to(dtype))

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def _attention(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
                   mask: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """q [B, H, T, D] against the cache's [B, Hkv, L, D]; returns [B, T, H*D]."""
        batch, _, width, dim = q.shape
        groups = self.heads // self.kv_heads
        if bias is not None:
            # decode, one query per row: each key head's query heads as the rows of one
            # batched product with that head's keys, read from the cache without a copy
            rows, length = batch * self.kv_heads, keys.shape[2]
            scores = torch.baddbmm(bias, q.reshape(rows, groups, dim),
                                   keys.reshape(rows, length, dim).transpose(1, 2),
                                   alpha=self.scale)
            out = torch.bmm(torch.softmax(scores, dim=-1), values.reshape(rows, length, dim))
            return out.reshape(batch, 1, self.heads * dim)
        if groups > 1:
            keys = keys.repeat_interleave(groups, dim=1)
            values = values.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scale)
        return out.transpose(1, 2).reshape(batch, width, self.heads * dim)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                cache: Any) -> torch.Tensor:
        """Hidden states [B, T, hidden] after the last layer (before the final norm)."""
        batch, width = ids.shape
        hidden = F.embedding(ids, self.backbone.embed_tokens.weight)
        bias = None
        if width == 1:  # the mask as an additive bias, one row per (sequence, key head)
            bias = torch.zeros(mask.shape[0], 1, mask.shape[-1],
                               dtype=hidden.dtype).masked_fill_(
                ~mask.reshape(mask.shape[0], 1, -1), float("-inf"))
            bias = bias.repeat_interleave(self.kv_heads, dim=0)
        cos, sin = self._rotary(positions)
        q_size = self.heads * self.head_dim
        kv_size = self.kv_heads * self.head_dim
        for index, layer in enumerate(self.layers):
            x = F.rms_norm(hidden, (self.hidden,), layer.input_norm, self.eps)
            qkv = linear(x, layer.qkv, layer.qkv_bias)
            q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
            q = q.view(batch, width, self.heads, self.head_dim)
            k = k.view(batch, width, self.kv_heads, self.head_dim)
            if layer.q_norm is not None:
                q = F.rms_norm(q, (self.head_dim,), layer.q_norm, self.eps)
                k = F.rms_norm(k, (self.head_dim,), layer.k_norm, self.eps)
            q = self._rotate(q.transpose(1, 2), cos, sin)
            k = self._rotate(k.transpose(1, 2), cos, sin)
            v = v.view(batch, width, self.kv_heads, self.head_dim).transpose(1, 2)
            keys, values = cache.update(k, v, index)
            hidden = hidden + linear(self._attention(q, keys, values, mask, bias),
                                       layer.out)
            x = F.rms_norm(hidden, (self.hidden,), layer.post_norm, self.eps)
            gate, up = linear(x, layer.gate_up).chunk(2, dim=-1)
            hidden = hidden + linear(F.silu(gate) * up, layer.down)
        return hidden

    def logits(self, last: torch.Tensor) -> torch.Tensor:
        """The output layer on the final-normed hidden states [B, hidden]: [B, V]."""
        head = self.model.lm_head
        return linear(last, head.weight, head.bias)
