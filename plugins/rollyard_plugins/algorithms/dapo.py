"""DAPO (Yu et al., 2025): clip-higher, token-level loss, dynamic sampling, overlong shaping.

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
    group_centred,
    ppo_clip,
)


@dataclass(frozen=True)
class DAPOOptions:
    clip_low: float = field(default=0.2, metadata={
        "help": "the ratio is clipped below at 1 - clip_low"})
    clip_high: float = field(default=0.28, metadata={
        "help": "the ratio is clipped above at 1 + clip_high (clip-higher)"})
    dynamic_sampling: bool = field(default=True, metadata={
        "help": "drop groups whose rewards are all equal (the run draws more)"})
    overlong_buffer: int | None = field(default=0, metadata={
        "help": "tokens before max-new-tokens where the soft length penalty starts (0: off). "
                "A length prior: it teaches a model to stop when its answers are far shorter "
                "than the budget, and costs reward when they are not"})
    overlong_penalty: float = field(default=1.0, metadata={
        "help": "the length penalty at max-new-tokens (reward units)"})

    def __post_init__(self) -> None:
        check_clip_range(self)
        if self.overlong_buffer is not None and (not isinstance(self.overlong_buffer, int)
                                                 or self.overlong_buffer < 0):
            raise ValueError(f"overlong_buffer is {self.overlong_buffer!r}; expected a number "
                             "of tokens >= 0")
        if not self.overlong_penalty >= 0:
            raise ValueError(f"overlong_penalty is {self.overlong_penalty!r}; it must be >= 0")


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

        ratio = torch.exp(batch.logprobs - batch.old_logprobs)
        return ppo_clip(ratio, batch.advantages, self.options.clip_low, self.options.clip_high)
