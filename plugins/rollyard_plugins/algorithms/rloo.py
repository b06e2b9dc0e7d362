"""RLOO (Ahmadian et al., 2024, "Back to Basics"): REINFORCE with a leave-one-out baseline.

Each sample is compared with the mean reward of the *other* samples of its group, an unbiased
baseline that needs no value model and no std scaling::

    A_i = r_i - (1 / (G - 1)) Σ_{j ≠ i} r_j                 (0 for a group of one)
    loss_t = -min(ρ_t A_i, clip(ρ_t, 1 - ε, 1 + ε) A_i)

averaged over the step's trained tokens (on-policy, ρ = 1 and this is REINFORCE).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rollyard import Algorithm, Sample
from rollyard.algorithms import (
    PolicyLoss,
    PolicyLossInput,
    StepInfo,
    check_clip_range,
    leave_one_out,
    ppo_clip,
)


@dataclass(frozen=True)
class RLOOOptions:
    clip_eps: float = field(default=0.2, metadata={
        "help": "PPO clip range for off-policy tokens: the ratio is clipped to 1 ± clip_eps"})

    def __post_init__(self) -> None:
        check_clip_range(self, "clip_eps", "clip_eps")


class RLOO(Algorithm):
    """Leave-one-out advantages, token-level PPO-clip, mean over the step's tokens."""

    name = "rloo"
    Options = RLOOOptions

    def advantages(self, samples: Sequence[Sample], step: StepInfo) -> list[float]:
        return leave_one_out([s.reward for s in samples], [s.group_id for s in samples])

    def policy_loss(self, batch: PolicyLossInput) -> PolicyLoss:
        import torch

        ratio = torch.exp(batch.logprobs - batch.old_logprobs)
        return ppo_clip(ratio, batch.advantages, self.options.clip_eps, self.options.clip_eps)
