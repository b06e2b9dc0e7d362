"""Choosing the next token of each running sequence, and its logprob.

The logprob of a sampled token follows SGLang's definition: ``log_softmax(logits / T)`` with
the request's temperature ``T``, taken before top-k/top-p truncation (which only restricts
which tokens may be drawn). Temperature 0 means greedy: the argmax, with logprob
``log_softmax(logits)`` (SGLang treats it as temperature 1 with top-k 1). The trainer computes
its logprobs the same way, so rollout and training logprobs agree.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

#: Temperatures below this are greedy decoding, as in SGLang.
GREEDY_EPS = 1e-6


@dataclass(frozen=True)
class SamplingOptions:
    """The per-request sampling settings the engine honours."""

    max_new_tokens: int = 128
    #: Stop tokens (and end-of-sequence unless ignored) cannot be drawn before this many.
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    seed: int | None = None
    no_stop_trim: bool = False
    skip_special_tokens: bool = True

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_EPS

    @property
    def effective_temperature(self) -> float:
        return 1.0 if self.greedy else self.temperature


def _truncation_mask(probs: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Boolean [B, V]: the tokens top-k and top-p leave drawable (always at least the best)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(probs.shape[-1]).expand_as(probs)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    keep_sorted = (ranks < top_k[:, None]) & (mass_before < top_p[:, None])
    keep_sorted[:, 0] = True
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


@dataclass(frozen=True)
class BatchOptions:
    """The sampling settings of one batch as tensors, built once per batch composition (the
    running batch keeps its rows for many decode steps) instead of on every step."""

    temperatures: torch.Tensor
    greedy: torch.Tensor
    all_greedy: bool
    #: None when no row truncates (top-k all, top-p 1): the sort is skipped then.
    top_k: torch.Tensor | None
    top_p: torch.Tensor | None
    #: Whether some row still has ``min_new_tokens`` to honour.
    holds_stops: bool

    @classmethod
    def of(cls, options: list[SamplingOptions], vocab: int) -> BatchOptions:
        greedy = [o.greedy for o in options]
        truncates = any(0 < o.top_k < vocab or o.top_p < 1.0 for o in options)
        return cls(
            temperatures=torch.tensor([[o.effective_temperature] for o in options]),
            greedy=torch.tensor(greedy), all_greedy=all(greedy),
            top_k=torch.tensor([o.top_k if o.top_k > 0 else vocab for o in options])
            if truncates else None,
            top_p=torch.tensor([o.top_p for o in options]) if truncates else None,
            holds_stops=any(o.min_new_tokens > 0 for o in options))


def sample_next(logits: torch.Tensor, batch: BatchOptions,
                rngs: list[random.Random]) -> tuple[list[int], list[float]]:
    """Draw one token per row of ``logits`` [B, V]; return the tokens and their logprobs.

    Each row draws with its own ``random.Random``, so a seeded request gives the same tokens
    whatever else is in the batch.
    """
    vocab = logits.shape[-1]
    logprobs = torch.log_softmax(logits / batch.temperatures.to(logits.dtype), dim=-1)
    tokens = logits.argmax(dim=-1)
    if not batch.all_greedy:
        probs = logprobs.exp()
        if batch.top_k is not None and batch.top_p is not None:
            probs = probs * _truncation_mask(probs, batch.top_k,
                                             batch.top_p.to(logits.dtype))
        cdf = probs.cumsum(dim=-1)
        # 1 - random() lies in (0, 1], so a zero-probability token is never drawn.
        draws = torch.tensor([1.0 - rng.random() for rng in rngs], dtype=cdf.dtype)
        drawn = torch.searchsorted(cdf, (draws * cdf[:, -1])[:, None]).squeeze(-1)
        tokens = torch.where(batch.greedy, tokens, drawn.clamp(max=vocab - 1))
    chosen = logprobs.gather(-1, tokens[:, None]).squeeze(-1)
    return tokens.tolist(), chosen.tolist()
