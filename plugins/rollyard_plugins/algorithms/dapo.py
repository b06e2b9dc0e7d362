"""DAPO (Yu et al., 2025): clip-higher, token-level loss, dynamic sampling, overlong shaping,
and optionally KL-Cov (Cui et al., 2025) against entropy collapse.

::

    A_i = (R_i - mean(R)) / (std(R) + 1e-6),   R_i = r_i + overlong(|y_i|)
    loss_t = -min(ρ_t A_i, clip(ρ_t, 1 - ε_low, 1 + ε_high) A_i)
    loss = Σ_i Σ_t loss_t / Σ_i |y_i|                     (mean over all tokens of the step)

``ε_high > ε_low`` lets unlikely tokens grow (against entropy collapse). Dynamic sampling
drops groups whose rewards are all equal and lets the run draw more. The soft overlong
penalty, with ``L`` the run's ``max_new_tokens`` and ``B`` the ``overlong_buffer`` (off by
default; ``None``, as in configurations saved before it was off, means ``L // 2``)::

    overlong(n) = 0                              if n <= L - B
                = -penalty × (n - (L - B)) / B   if L - B < n <= L
                = -penalty                       if n > L

KL-Cov (``kl_cov_ratio`` k > 0) takes the tokens that drive the entropy down most: over the
trained tokens of one forward pass, with the covariance term
``c_t = (log π_t - mean log π) (A_t - mean A)``, the ``k`` share of tokens (at least one) with
the largest positive ``c_t`` get, instead of the clipped loss::

    loss_t = -ρ_t A_t + β |log π_t - log π_old,t|        (β = ``kl_cov_coef``)

A likely token with a positive advantage (or an unlikely one with a negative advantage) is
then held near the policy that sampled it, while an unlikely token with a positive advantage
learns unhindered: the policy keeps some of its entropy for longer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DAPOOptions:
    clip_low: float = option(0.2, help="the ratio is clipped below at 1 - clip_low")
    clip_high: float = option(0.28, help="the ratio is clipped above at 1 + clip_high "
                                         "(clip-higher)")
    dynamic_sampling: bool = option(True, help="drop groups whose rewards are all equal (the "
                                               "run draws more)")
    overlong_buffer: int | None = option(
        0, help="tokens before max-new-tokens where the soft length penalty starts (0: off). "
                "A length prior: it teaches a model to stop when its answers are far shorter "
                "than the budget, and costs reward when they are not")
    overlong_penalty: float = option(1.0, help="the length penalty at max-new-tokens (reward "
                                               "units)")
    kl_cov_ratio: float = option(
        0.0, help="KL-Cov: the share of each forward pass's trained tokens, those with the "
                  "largest covariance of logprob and advantage, held to the sampling policy "
                  "by a KL penalty instead of the clip (0: off)")
    kl_cov_coef: float = option(1.0, help="KL-Cov: the weight of that penalty, |logprob - old "
                                          "logprob|")

    def __post_init__(self) -> None:
        check_clip_range(self)
        if self.overlong_buffer is not None and (not isinstance(self.overlong_buffer, int)
                                                 or self.overlong_buffer < 0):
            raise ValueError(f"overlong_buffer is {self.overlong_buffer!r}; expected a number "
                             "of tokens >= 0")
        if not self.overlong_penalty >= 0:
            raise ValueError(f"overlong_penalty is {self.overlong_penalty!r}; it must be >= 0")
        if not 0 <= self.kl_cov_ratio <= 1:
            raise ValueError(f"kl_cov_ratio is {self.kl_cov_ratio!r}; expected a share of "
                             "tokens between 0 and 1")
        if not self.kl_cov_coef >= 0:
            raise ValueError(f"kl_cov_coef is {self.kl_cov_coef!r}; it must be >= 0")


def overlong_penalty(length: int, max_len: int, buffer: int, penalty: float) -> float:
    """DAPO's soft overlong punishment of a response of ``length`` tokens (<= 0)."""
    if buffer <= 0:
        return 0.0
    start = max_len - buffer
    if length <= start:
        return 0.0
    if length > max_len:
        return -penalty
    return -penalty * (length - start) / buffer


def high_covariance_tokens(logprobs: torch.Tensor, advantages: torch.Tensor,
                           mask: torch.Tensor, share: float) -> torch.Tensor:
    """Where KL-Cov applies: of the trained tokens (``mask`` > 0), the ``share`` (at least one)
    with the largest covariance term ``(logprob - mean) (A - mean)``, if it is positive.
    Returns a bool tensor shaped like ``logprobs``."""
    import torch

    trained = mask > 0
    count = int(trained.sum())
    chosen = torch.zeros(logprobs.numel(), dtype=torch.bool, device=logprobs.device)
    if count == 0:
        return chosen.view_as(logprobs)
    with torch.no_grad():
        logprobs = logprobs.detach()
        covariance = ((advantages - advantages[trained].mean())
                      * (logprobs - logprobs[trained].mean())).masked_fill(~trained, -math.inf)
        chosen[torch.topk(covariance.flatten(), max(1, int(share * count))).indices] = True
        return chosen.view_as(logprobs) & trained & (covariance > 0)


class DAPO(Algorithm):
    """Clip-higher PPO over all tokens of the step, with optional overlong reward shaping."""

    name = "dapo"
    Options = DAPOOptions

    @property
    def filters_zero_variance(self) -> bool:
        return self.options.dynamic_sampling

    def advantages(self, samples: Sequence[Sample], step: StepInfo) -> list[float]:
        o = self.options
        budget = step.max_response_len
        buffer = budget // 2 if o.overlong_buffer is None else o.overlong_buffer
        shaped = [s.reward + overlong_penalty(s.response_len, budget, buffer, o.overlong_penalty)
                  for s in samples]
        return group_centred(shaped, [s.group_id for s in samples])

    def policy_loss(self, batch: PolicyLossInput) -> PolicyLoss:
        import torch

        o = self.options
        ratio = torch.exp(batch.logprobs - batch.old_logprobs)
        loss = ppo_clip(ratio, batch.advantages, o.clip_low, o.clip_high)
        if o.kl_cov_ratio == 0:
            return loss
        held = high_covariance_tokens(batch.logprobs, batch.advantages, batch.mask,
                                      o.kl_cov_ratio)
        penalised = (-ratio * batch.advantages
                     + o.kl_cov_coef * (batch.logprobs - batch.old_logprobs).abs())
        return PolicyLoss(torch.where(held, penalised, loss.per_token), loss.clipped & ~held)
