"""Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training"): GRPO without its biases.

GRPO divides the advantage by the group's std (favouring questions that are too easy or too
hard) and each sample's loss by its own length (favouring long wrong answers). Dr. GRPO drops
both::

    A_i = r_i - mean(r)
    loss_t = -min(ρ_t A_i, clip(ρ_t, 1 - ε, 1 + ε) A_i)
    loss = Σ_i Σ_t loss_t / (L_max × N)

with ``L_max`` the run's ``max_new_tokens`` (else the step's longest response) and ``N`` the
step's number of trained samples: a constant, so every token weighs the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from rollyard import Sample
from rollyard.algorithms import PPOClipAlgorithm, StepInfo, group_centred


class DrGRPO(PPOClipAlgorithm):
    """Centred advantages, token-level PPO-clip, sum over tokens / (max length × samples)."""

    name = "dr-grpo"
    loss_aggregation = "seq-mean-token-sum-norm"

    def advantages(self, samples: Sequence[Sample], step: StepInfo) -> list[float]:
        return group_centred([s.reward for s in samples], [s.group_id for s in samples],
                             scale_by_std=False)
