"""GRPO (Shao et al., 2024): group-normalised advantages and the PPO-clip loss.

For the ``G`` samples of one group with rewards ``r_1 … r_G``::

    A_i = (r_i - mean(r)) / (std(r) + 1e-6)          (population std; only centred without
                                                      scale_by_std)
    loss_t = -min(ρ_t A_i, clip(ρ_t, 1 - ε, 1 + ε) A_i),   ρ_t = exp(logπ_θ(y_t) - logπ_old(y_t))

and the step loss is the mean of ``loss_t`` over every trained token of the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rollyard import Sample
from rollyard.algorithms import ClipOptions, PPOClipAlgorithm, StepInfo, group_centred
from rollyard.options import option


@dataclass(frozen=True)
class GRPOOptions(ClipOptions):
    scale_by_std: bool = option(True, help="divide each group's centred rewards by their "
                                           "standard deviation")


class GRPO(PPOClipAlgorithm):
    """Group-normalised advantages, token-level PPO-clip, mean over the step's tokens."""

    name = "grpo"
    Options = GRPOOptions

    def advantages(self, samples: Sequence[Sample], step: StepInfo) -> list[float]:
        return group_centred([s.reward for s in samples], [s.group_id for s in samples],
                             scale_by_std=self.options.scale_by_std)
