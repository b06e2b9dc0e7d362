"""GSPO (Zheng et al., 2025, "Group Sequence Policy Optimization"): a sequence-level ratio.

Token-level ratios are noisy, and clipping them token by token mixes signals of one sample;
GSPO takes one length-normalised ratio per sample and clips the sample as a whole::

    A_i = (r_i - mean(r)) / (std(r) + 1e-6)
    s_i = exp((1 / |y_i|) Σ_t (logπ_θ(y_t) - logπ_old(y_t)))
    loss_i = -min(s_i A_i, clip(s_i, 1 - ε_low, 1 + ε_high) A_i)
    loss = (1 / N) Σ_i loss_i

The clip ranges are small (paper: 3e-4 and 4e-4) because ``s_i`` is a geometric mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rollyard import Algorithm, Sample
from rollyard.algorithms import (
    PolicyLoss,
    PolicyLossInput,
    StepInfo,
    check_clip_range,
    group_centred,
    ppo_clip,
)
from rollyard.options import option


@dataclass(frozen=True)
class GSPOOptions:
    clip_low: float = option(3e-4, help="the sequence ratio is clipped below at 1 - clip_low")
    clip_high: float = option(4e-4, help="the sequence ratio is clipped above at 1 + "
                                         "clip_high")

    def __post_init__(self) -> None:
        check_clip_range(self)


class GSPO(Algorithm):
    """Group-normalised advantages, one clipped ratio per sample, mean over samples."""

    name = "gspo"
    Options = GSPOOptions
    loss_aggregation = "seq-mean-token-mean"

    def advantages(self, samples: Sequence[Sample], step: StepInfo) -> list[float]:
        return group_centred([s.reward for s in samples], [s.group_id for s in samples])

    def policy_loss(self, batch: PolicyLossInput) -> PolicyLoss:
        import torch

        mask = batch.mask.to(batch.logprobs.dtype)
        lengths = mask.sum(-1).clamp(min=1.0)
        log_ratio = torch.where(mask > 0, batch.logprobs - batch.old_logprobs,
                                torch.zeros_like(batch.logprobs))
        ratio = torch.exp((log_ratio * mask).sum(-1) / lengths)  # [b]
        advantage = (batch.advantages * mask).sum(-1) / lengths  # each row repeats one value
        loss = ppo_clip(ratio, advantage, self.options.clip_low, self.options.clip_high)
        # one loss per sample, on each of its tokens: the sequence-mean of token-means is it
        return PolicyLoss(loss.per_token[:, None].expand_as(mask),
                          loss.clipped[:, None].expand_as(mask))
