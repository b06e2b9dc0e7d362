"""The trainer's side of an algorithm: recomputed logprobs, loading the plugin, and the loss of
one micro-batch around the plugin's per-token policy loss.

Log-probabilities follow the engine's definition: the log-probability of the sampled token
under ``log_softmax(logits / temperature)``, so a freshly synced policy reproduces the rollout
logprobs and the PPO ratio starts at one.

Truncated importance sampling (``tis_cap``, Yao et al. 2025, "Your efficient RL framework
secretly brings you off-policy RL training"): the engine samples from ``π_engine``, which
differs from the trainer's ``π_old`` (other kernels, bf16, stale weights). Each token's policy
loss is weighted by ``min(π_old / π_engine, C)`` and the algorithm's ratio is taken against
``π_old``. One optimizer step is taken per batch, so ``π_old`` is this step's own forward pass,
detached: no second forward is needed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from rollyard.algorithms import Algorithm, PolicyLossInput, StepInfo
from rollyard.configurable import options_prefix
from rollyard.options import build_options, field_specs

if TYPE_CHECKING:
    from rollyard.plugins import PluginManager, PluginRecord
    from rollyard.training.config import TrainConfig


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor,
                   temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of ``targets`` and the entropy, both per position, at ``temperature``.

    ``logits`` is [b, t, V] (column j predicts ``targets[:, j]``), the results are [b, t].
    """
    log_probs = torch.log_softmax(logits.float() / temperature, dim=-1)
    chosen = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(log_probs.exp() * log_probs).sum(-1)
    return chosen, entropy


# --------------------------------------------------------------------------- the plugin


def algorithm_options(cls: type[Algorithm], config: TrainConfig) -> Any:
    """``cls.Options`` decoded from the plain data ``config.algorithm_options`` by the one
    decoder of plugin options (:func:`rollyard.options.build_options`: every value checked as
    a flag or run.toml value would be); ConfigError naming the algorithm and the option.

    ``config.clip_eps`` (the pre-plugin ``--clip-eps``) fills a ``clip_eps`` option the
    dictionary leaves out.
    """
    values = dict(config.algorithm_options)
    if config.clip_eps is not None and "clip_eps" in field_specs(cls.Options, cls.name):
        values.setdefault("clip_eps", config.clip_eps)
    return build_options(cls.Options, options_prefix(cls), values,
                         source=f"algorithm {cls.name!r}")


def load_algorithm(config: TrainConfig, manager: PluginManager | None = None,
                   ) -> tuple[Algorithm, PluginRecord]:
    """The algorithm ``config.algorithm`` resolved through this process's entry points, built
    from its options, and the plugin that registered it (for error messages).

    UnknownPluginError (with the nearest name) when no plugin registers that name.
    """
    from rollyard.plugins import PluginManager

    manager = manager or PluginManager()
    manager.load_for_run([("algorithm", config.algorithm)])
    cls = manager.get("algorithm", config.algorithm)
    return cls(algorithm_options(cls, config)), manager.owner("algorithm", config.algorithm)


# --------------------------------------------------------------------------- the loss


class LossProblem(Exception):
    """The algorithm's loss for a micro-batch cannot be used; the step must not be applied."""


@dataclass
class LossTerms:
    """One micro-batch: ``loss`` is its share of the step loss (the shares of all micro-batches
    and ranks add up to it); ``policy_loss`` likewise; the rest are sums over trained tokens,
    except ``tis_ratio_max``."""

    loss: torch.Tensor
    policy_loss: float
    kl: float
    entropy: float
    clip_fraction: float
    logprob_mismatch: float
    tokens: float
    tis_ratio: float = 0.0
    tis_truncated: float = 0.0
    tis_ratio_max: float = 0.0


def truncated_is_weights(trainer_logprobs: torch.Tensor, engine_logprobs: torch.Tensor,
                         mask: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(min(ratio, cap), ratio)`` with ``ratio = exp(trainer - engine)`` per token, detached;
    1 on untrained tokens (padding carries no engine logprob)."""
    with torch.no_grad():
        ratio = torch.where(mask > 0, torch.exp(trainer_logprobs - engine_logprobs),
                            torch.ones_like(trainer_logprobs))
        return ratio.clamp(max=cap), ratio


def _regularisers(logprobs: torch.Tensor, mask: torch.Tensor, entropy: torch.Tensor | None,
                  ref_logprobs: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sums of the k3 KL estimate ``exp(ref - lp) - (ref - lp) - 1`` (non-negative,
    unbiased for KL(π || ref)) and of the entropy; zeros where not given."""
    kl_sum = torch.zeros((), device=logprobs.device)
    entropy_sum = torch.zeros((), device=logprobs.device)
    if ref_logprobs is not None:
        delta = ref_logprobs - logprobs
        kl_sum = ((torch.exp(delta) - delta - 1.0) * mask).sum()
    if entropy is not None:
        entropy_sum = (entropy * mask).sum()
    return kl_sum, entropy_sum


def micro_batch_loss(algorithm: Algorithm, logprobs: torch.Tensor,
                     engine_logprobs: torch.Tensor, advantages: torch.Tensor,
                     mask: torch.Tensor, step: StepInfo, *, entropy: torch.Tensor | None = None,
                     entropy_coef: float = 0.0, ref_logprobs: torch.Tensor | None = None,
                     kl_coef: float = 0.0, tis_cap: float | None = None,
                     trainer_old: torch.Tensor | None = None) -> LossTerms:
    """The algorithm's policy loss (TIS-weighted when ``tis_cap`` is set, aggregated as the
    algorithm says) plus ``kl_coef ×`` KL and minus ``entropy_coef ×`` entropy, both means over
    the step's tokens. All tensors are [b, t]; ``entropy`` and ``ref_logprobs`` are reported
    when given and enter the loss only with a non-zero coefficient.

    ``trainer_old`` are the trainer's logprobs before the step's first update, when the step
    has several mini-batches (otherwise this forward pass stands for them).

    LossProblem when the algorithm raises, returns a per-token loss of the wrong shape, or
    yields a loss that is not a finite scalar.
    """
    mask = mask.to(logprobs.dtype)
    old = engine_logprobs
    weights = ratio = None
    if tis_cap is not None:
        # the trainer's policy before the step's first update: this forward pass on the first
        # (or only) mini-batch, the logprobs recorded before the updates on later ones
        old = logprobs.detach() if trainer_old is None else trainer_old
        weights, ratio = truncated_is_weights(old, engine_logprobs, mask, tis_cap)
    batch = PolicyLossInput(logprobs, old, advantages, mask, entropy=entropy,
                            ref_logprobs=ref_logprobs)
    try:
        out = algorithm.policy_loss(batch)
        per_token = out.per_token
        if not isinstance(per_token, torch.Tensor) or per_token.shape != mask.shape:
            shape = tuple(per_token.shape) if isinstance(per_token, torch.Tensor) else per_token
            raise LossProblem(f"policy_loss returned a per-token loss of shape {shape!r}; "
                              f"expected the batch's shape {tuple(mask.shape)}")
        if weights is not None:
            per_token = per_token * weights
        policy = algorithm.aggregate(per_token, mask, step)
    except LossProblem:
        raise
    except Exception as exc:
        raise LossProblem(f"the policy loss raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(policy, torch.Tensor) or policy.dim() != 0:
        shape = tuple(policy.shape) if isinstance(policy, torch.Tensor) else type(policy).__name__
        raise LossProblem(f"the policy loss is not a scalar (shape {shape})")
    value = float(policy.detach())
    if not math.isfinite(value):
        raise LossProblem(f"the policy loss is {value}")
    kl_sum, entropy_sum = _regularisers(logprobs, mask, entropy, ref_logprobs)
    tokens = max(step.tokens, 1.0)
    loss = policy
    if ref_logprobs is not None and kl_coef:
        loss = loss + kl_coef * kl_sum / tokens
    if entropy is not None and entropy_coef:
        loss = loss - entropy_coef * entropy_sum / tokens
    with torch.no_grad():
        clipped = out.clipped
        clip_sum = 0.0 if clipped is None else float((clipped.to(mask.dtype) * mask).sum())
        mismatch = float(((logprobs - engine_logprobs).abs() * mask).sum())
    terms = LossTerms(loss=loss, policy_loss=value, kl=float(kl_sum.detach()),
                      entropy=float(entropy_sum.detach()), clip_fraction=clip_sum,
                      logprob_mismatch=mismatch, tokens=float(mask.sum()))
    if ratio is not None:
        terms.tis_ratio = float((ratio * mask).sum())
        terms.tis_truncated = float(((ratio > tis_cap).to(mask.dtype) * mask).sum())
        terms.tis_ratio_max = float((ratio * mask).max()) if mask.any() else 0.0
    return terms
