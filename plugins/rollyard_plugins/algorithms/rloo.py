"""RLOO (Ahmadian et al., 2024, "Back to Basics"): REINFORCE with a leave-one-out baseline.

Each sample is compared with the mean reward of the *other* samples of its group, an unbiased
baseline that needs no value model and no std scaling::

    A_i = r_i - (1 / (G - 1)) Σ_{j ≠ i} r_j                 (0 for a group of one)
    loss_t = -min(ρ_t A_i, clip(ρ_t, 1 - ε, 1 + ε) A_i)

averaged over the step's trained tokens (on-policy, ρ = 1 and this is REINFORCE).
"""

from __future__ import annotations

from collections.abc import Sequence

from rollyard import Sample
from rollyard.algorithms import PPOClipAlgorithm, StepInfo, leave_one_out


class RLOO(PPOClipAlgorithm):
    """Leave-one-out advantages, token-level PPO-clip, mean over the step's tokens."""

    name = "rloo"

    def advantages(self, samples: Sequence[Sample], step: StepInfo) -> list[float]:
        return leave_one_out([s.reward for s in samples], [s.group_id for s in samples])
