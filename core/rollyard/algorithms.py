"""Algorithms as plugins: the advantage estimate and the policy loss.

An algorithm is a class derived from :class:`Algorithm`, registered by the
``register_algorithms`` hook and selected by name (``--algorithm NAME``). Its options are a
frozen dataclass on the class; the core derives ``--<name>-<field>`` flags from it and hands
the class an instance::

    @dataclass(frozen=True)
    class Options:
        clip_eps: float = field(default=0.2, metadata={"help": "PPO clip range"))

    class MyAlgorithm(Algorithm):
        name = "mine"
        Options = Options

        def advantages(self, samples, step): ...
        def policy_loss(self, batch): ...

The trainer does everything around the two methods the same way for every algorithm: it
drops groups whose rewards are all equal (when asked), recomputes the logprobs, weights each
token by truncated importance sampling when ``tis_cap`` is set, aggregates the per-token loss
as :attr:`Algorithm.loss_aggregation` says, adds the KL and entropy terms, and steps the
optimizer only when the loss is a finite scalar.

Nothing here imports torch at module level: ``rollyard plugins`` imports every algorithm
module, and only the trainer's processes need torch.
"""

from __future__ import annotations

import abc
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from rollyard.configurable import Configurable, received_options
from rollyard.model_facts import population_std, rewards_differ
from rollyard.options import option

if TYPE_CHECKING:
    import torch

    from rollyard.types import Sample

#: How the per-token policy loss becomes the step's loss (see :meth:`Algorithm.aggregate`).
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


@dataclass(frozen=True)
class NoOptions:
    """The options of an algorithm that declares none."""


@dataclass(frozen=True)
class StepInfo:
    """The size of one optimizer step, over all its micro-batches and data-parallel ranks.

    ``max_response_len`` is the run's ``max_new_tokens`` when the trainer knows it, else the
    longest response of the step.
    """

    sequences: int
    tokens: float
    max_response_len: int


@dataclass
class PolicyLossInput:
    """One micro-batch, every tensor [b, t]: row ``i`` is a sample, column ``j`` its response
    token ``j`` (padding after a sample's last response token has ``mask`` 0).

    ``old_logprobs`` are those the ratio is taken against: the rollout engine's, or the
    trainer's own before this step when truncated importance sampling is on (the trainer then
    corrects for the engine itself). ``advantages`` repeat each sample's advantage on all of
    its tokens; ``mask`` is 1 on trained tokens. ``ref_logprobs`` is set only when the trainer
    keeps a reference policy (``needs_reference`` or a KL term).
    """

    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    advantages: torch.Tensor
    mask: torch.Tensor
    entropy: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None


@dataclass
class PolicyLoss:
    """The loss of every token ([b, t]; masked tokens are ignored) and, optionally, where the
    ratio was clipped (1 or True there), reported as ``clip_fraction``."""

    per_token: torch.Tensor
    clipped: torch.Tensor | None = None


class Algorithm(Configurable, abc.ABC):
    """An RL algorithm: how samples are scored against each other and what the policy loss is.

    One instance per process that needs it, built as ``cls(options)`` from an instance of
    ``cls.Options`` (a dict of raw values by name is decoded and checked into one; None gives
    the defaults). Subclasses set ``name`` (unique among algorithms) and implement
    :meth:`advantages` and :meth:`policy_loss`.
    """

    name: ClassVar[str] = ""
    #: Frozen dataclass of this algorithm's options: :func:`~rollyard.options.option` fields
    #: (plain ``dataclasses.field(default=..., metadata={"help": ...})`` fields, the style of
    #: algorithms written before, work too); cross-field validation goes in
    #: ``__post_init__`` raising ValueError that names the field.
    Options: ClassVar[type] = NoOptions
    #: How :meth:`aggregate` turns per-token losses into the step loss; one of
    #: :data:`LOSS_AGGREGATIONS`.
    loss_aggregation: ClassVar[str] = "token-mean"
    #: True when :meth:`policy_loss` reads ``ref_logprobs``: the trainer keeps a frozen copy of
    #: the initial policy for it.
    needs_reference: ClassVar[bool] = False

    def __init__(self, options: Any = None) -> None:
        options = received_options(type(self), options)
        if not isinstance(options, self.Options):
            raise TypeError(f"algorithm {self.name!r} takes {self.Options.__qualname__} "
                            f"options, got {type(options).__name__}")
        self.options = options

    @property
    def filters_zero_variance(self) -> bool | None:
        """Whether groups whose rewards are all equal are dropped before training (and the
        run draws more); None leaves it to the run's setting."""
        return None

    @abc.abstractmethod
    def advantages(self, samples: Sequence[Sample], step: StepInfo) -> list[float]:
        """One finite advantage per sample, in order; groups are samples sharing ``group_id``."""

    @abc.abstractmethod
    def policy_loss(self, batch: PolicyLossInput) -> PolicyLoss:
        """The loss of every token of one micro-batch, before masking and aggregation."""

    def aggregate(self, per_token: torch.Tensor, mask: torch.Tensor,
                  step: StepInfo) -> torch.Tensor:
        """This micro-batch's share of the step loss (the shares of all micro-batches and ranks
        add up to the step loss), as ``loss_aggregation`` says:

        - ``token-mean``: sum over the step's tokens / ``step.tokens``;
        - ``seq-mean-token-mean``: each sample's token mean, averaged over ``step.sequences``;
        - ``seq-mean-token-sum-norm``: sum over tokens / (``step.max_response_len`` ×
          ``step.sequences``), a constant that carries no length bias (Dr. GRPO).
        """
        import torch

        mask = mask.to(per_token.dtype)
        masked = torch.where(mask > 0, per_token, torch.zeros_like(per_token)) * mask
        if self.loss_aggregation == "token-mean":
            return masked.sum() / max(step.tokens, 1.0)
        if self.loss_aggregation == "seq-mean-token-mean":
            per_row = masked.sum(-1) / mask.sum(-1).clamp(min=1.0)
            return per_row.sum() / max(step.sequences, 1)
        if self.loss_aggregation == "seq-mean-token-sum-norm":
            return masked.sum() / max(step.max_response_len * step.sequences, 1)
        raise ValueError(f"algorithm {self.name!r}: loss_aggregation is "
                         f"{self.loss_aggregation!r}; expected one of {LOSS_AGGREGATIONS}")


# --------------------------------------------------------------------------- shared math


def group_indices(group_ids: Sequence[str]) -> dict[str, list[int]]:
    """The positions of each group's samples, groups in order of first appearance."""
    members: dict[str, list[int]] = defaultdict(list)
    for index, group in enumerate(group_ids):
        members[group].append(index)
    return dict(members)


def group_centred(rewards: Sequence[float], group_ids: Sequence[str], *,
                  scale_by_std: bool = True, eps: float = 1e-6) -> list[float]:
    """``r - mean_g``, divided by ``std_g + eps`` (population std) with ``scale_by_std``.

    A group whose rewards are all equal gets zero advantages.
    """
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards for {len(group_ids)} group ids")
    values = [0.0] * len(rewards)
    for indices in group_indices(group_ids).values():
        group = [rewards[i] for i in indices]
        if not rewards_differ(group):
            continue
        mean, std = sum(group) / len(group), population_std(group)
        for i in indices:
            values[i] = (rewards[i] - mean) / (std + eps) if scale_by_std else rewards[i] - mean
    return values


def leave_one_out(rewards: Sequence[float], group_ids: Sequence[str]) -> list[float]:
    """``r_i - mean of the other rewards of i's group``; 0 for a group of one sample."""
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards for {len(group_ids)} group ids")
    values = [0.0] * len(rewards)
    for indices in group_indices(group_ids).values():
        n = len(indices)
        if n < 2:
            continue
        total = sum(rewards[i] for i in indices)
        for i in indices:
            values[i] = rewards[i] - (total - rewards[i]) / (n - 1)
    return values


def ppo_clip(ratio: torch.Tensor, advantages: torch.Tensor, clip_low: float,
             clip_high: float) -> PolicyLoss:
    """PPO's pessimistic clipped objective, per element:
    ``-min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)``; ``clipped`` marks the
    ratios outside that range."""
    import torch

    clipped_ratio = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    per_token = -torch.minimum(ratio * advantages, clipped_ratio * advantages)
    with torch.no_grad():
        outside = (ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)
    return PolicyLoss(per_token, outside)


def check_clip_range(options: Any, low: str = "clip_low", high: str = "clip_high") -> None:
    """ValueError naming the field when a clip range is negative, too wide or inverted."""
    lo, hi = getattr(options, low), getattr(options, high)
    for field_name, value in ((low, lo), (high, hi)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{field_name} is {value!r}; a clip range must be a finite "
                             "number >= 0")
    if lo >= 1:
        raise ValueError(f"{low} is {lo!r}; it must be below 1 (the ratio is clipped at "
                         f"1 - {low})")
    if lo > hi:
        raise ValueError(f"{low}={lo!r} is greater than {high}={hi!r}; the low clip range "
                         "must not exceed the high one")


@dataclass(frozen=True)
class ClipOptions:
    """A symmetric PPO clip range: the options of the PPO-clip algorithms."""

    clip_eps: float = option(0.2, help="PPO clip range: the ratio is clipped to 1 ± clip_eps")

    def __post_init__(self) -> None:
        check_clip_range(self, "clip_eps", "clip_eps")


class PPOClipAlgorithm(Algorithm):
    """Token-level PPO-clip with a symmetric range (``Options`` derive from ClipOptions);
    subclasses supply the advantages."""

    Options: ClassVar[type] = ClipOptions

    def policy_loss(self, batch: PolicyLossInput) -> PolicyLoss:
        import torch

        ratio = torch.exp(batch.logprobs - batch.old_logprobs)
        return ppo_clip(ratio, batch.advantages, self.options.clip_eps, self.options.clip_eps)
