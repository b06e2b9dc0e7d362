"""Pure-torch ``rotary_embedding``, with vLLM's custom-op signature (in place)."""

from __future__ import annotations

import torch


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
            is_neox: bool) -> torch.Tensor:
    """Rotate ``x`` [tokens, heads, rot_dim] by per-token ``cos``/``sin`` [tokens, rot_dim/2]."""
    cos, sin = cos[:, None, :], sin[:, None, :]
    if is_neox:
        first, second = x.chunk(2, dim=-1)
    else:
        first, second = x[..., 0::2], x[..., 1::2]
    out_first = first * cos - second * sin
    out_second = second * cos + first * sin
    if is_neox:
        return torch.cat((out_first, out_second), dim=-1)
    return torch.stack((out_first, out_second), dim=-1).flatten(-2)


def rotary_embedding(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None,
                     head_size: int, cos_sin_cache: torch.Tensor, is_neox: bool) -> None:
    """Apply rotary position embeddings to ``query`` and ``key`` in place.

    ``query``/``key`` are [tokens, heads * head_size] (or [tokens, heads, head_size]);
    ``cos_sin_cache`` is [max_positions, rot_dim] holding cos then sin halves.
    """
    positions = positions.flatten()
    tokens = positions.shape[0]
    rot_dim = cos_sin_cache.shape[-1]
    cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
    for tensor in (query, key):
        if tensor is None:
            continue
        view = tensor.view(tokens, -1, head_size)
        rotated = _rotate(view[..., :rot_dim].float(), cos.float(), sin.float(), is_neox)
        view[..., :rot_dim] = rotated.to(view.dtype)
