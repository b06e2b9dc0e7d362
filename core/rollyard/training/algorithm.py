"""GRPO advantages and the PPO-clip policy loss (with optional KL and entropy terms).

Log-probabilities follow the engine's definition: the log-probability of the sampled token
under ``log_softmax(logits / temperature)``, so a freshly synced policy reproduces the rollout
logprobs and the PPO ratio starts at one.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import torch

ZERO_VARIANCE_STD = 1e-8


@dataclass
class Advantages:
    """Per-sample GRPO advantages; ``keep`` is False for samples of filtered groups."""

    values: list[float]
    keep: list[bool]
    num_groups: int
    num_groups_filtered: int


def grpo_advantages(rewards: list[float], group_ids: list[str], *,
                    filter_zero_variance: bool = True, scale_by_std: bool = True,
                    eps: float = 1e-6) -> Advantages:
    """Group-normalised advantages ``(r - mean_g) / (std_g + eps)`` (population std).

    A group whose rewards are all equal carries no learning signal; with
    ``filter_zero_variance`` its samples are dropped, otherwise their advantage is zero.
    """
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards for {len(group_ids)} group ids")
    members: dict[str, list[int]] = defaultdict(list)
    for index, group in enumerate(group_ids):
        members[group].append(index)
    values = [0.0] * len(rewards)
    keep = [True] * len(rewards)
    filtered = 0
    for indices in members.values():
        group_rewards = [rewards[i] for i in indices]
        mean = sum(group_rewards) / len(group_rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in group_rewards) / len(group_rewards))
        if std < ZERO_VARIANCE_STD and filter_zero_variance:
            filtered += 1
            for i in indices:
                keep[i] = False
            continue
        for i in indices:
            centred = rewards[i] - mean
            values[i] = centred / (std + eps) if scale_by_std else centred
    return Advantages(values, keep, len(members), filtered)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor,
                   temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of ``targets`` and the entropy, both per position, at ``temperature``.

    ``logits`` is [b, s, V] (position t predicts ``targets[:, t]``), the results are [b, s].
    """
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    chosen = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return chosen, entropy


@dataclass
class LossTerms:
    """Sums over masked tokens (not means), so micro-batches and ranks can be added up."""

    loss: torch.Tensor
    policy_loss: float
    kl: float
    entropy: float
    clip_fraction: float
    logprob_mismatch: float
    tokens: float


def ppo_clip_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                  mask: torch.Tensor, *, clip_eps: float, entropy: torch.Tensor | None = None,
                  entropy_coef: float = 0.0, ref_logprobs: torch.Tensor | None = None,
                  kl_coef: float = 0.0) -> LossTerms:
    """PPO-clip on the rollout logprobs, minus an entropy bonus, plus a KL penalty.

    All tensors are [b, s]; ``mask`` is 1 on trained tokens. ``entropy`` and ``ref_logprobs``
    are always reported when given and enter the loss only with a non-zero coefficient. The
    loss returned is the *sum* over masked tokens; the caller divides by the batch's total
    token count. KL uses the k3
    estimator ``exp(ref - lp) - (ref - lp) - 1`` (non-negative, unbiased for KL(pi || ref)).
    """
    mask = mask.to(logprobs.dtype)
    log_ratio = logprobs - old_logprobs
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    policy = (per_token * mask).sum()
    loss = policy
    kl_sum = torch.zeros(())
    entropy_sum = torch.zeros(())
    if ref_logprobs is not None:
        delta = ref_logprobs - logprobs
        kl_sum = ((torch.exp(delta) - delta - 1.0) * mask).sum()
        if kl_coef:
            loss = loss + kl_coef * kl_sum
    if entropy is not None:
        entropy_sum = (entropy * mask).sum()
        if entropy_coef:
            loss = loss - entropy_coef * entropy_sum
    with torch.no_grad():
        clip_frac = (((ratio - 1.0).abs() > clip_eps).to(mask.dtype) * mask).sum()
        mismatch = ((logprobs - old_logprobs).abs() * mask).sum()
    return LossTerms(loss=loss, policy_loss=float(policy.detach()), kl=float(kl_sum.detach()),
                     entropy=float(entropy_sum.detach()), clip_fraction=float(clip_frac),
                     logprob_mismatch=float(mismatch), tokens=float(mask.sum()))
