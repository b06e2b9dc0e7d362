"""The trainer's loss around an algorithm plugin: aggregation, KL and entropy terms, truncated
importance sampling and the checks at the plugin boundary, against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from rollyard.algorithms import Algorithm, PolicyLoss, StepInfo
from rollyard.training.algorithm import (
    LossProblem,
    micro_batch_loss,
    token_logprobs,
)
from rollyard_plugins.algorithms.grpo import GRPO


def test_token_logprobs_use_the_engine_definition() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7)
    targets = torch.randint(0, 7, (2, 3))
    chosen, entropy = token_logprobs(logits, targets, temperature=0.7)
    manual = torch.log_softmax(logits / 0.7, dim=-1)
    assert torch.allclose(chosen, manual.gather(-1, targets.unsqueeze(-1)).squeeze(-1))
    assert torch.allclose(entropy, -(manual.exp() * manual).sum(-1))


def _loss(logprobs, old, adv, mask, algorithm=None, step=None, **kw):
    lp = torch.tensor([logprobs], requires_grad=True)
    tokens = float(sum(mask))
    step = step or StepInfo(sequences=1, tokens=tokens, max_response_len=len(mask))
    terms = micro_batch_loss(algorithm or GRPO(), lp, torch.tensor([old]), torch.tensor([adv]),
                             torch.tensor([mask]), step, **kw)
    return terms, lp


def test_on_policy_grpo_loss_is_minus_the_mean_masked_advantage() -> None:
    terms, _ = _loss([-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0], [2.0, -1.0, 5.0], [1.0, 1.0, 0.0])
    assert terms.loss.item() == pytest.approx(-(2.0 - 1.0) / 2)
    assert terms.tokens == 2.0 and terms.logprob_mismatch == 0.0 and terms.clip_fraction == 0.0


def test_clipped_tokens_get_no_gradient() -> None:
    terms, lp = _loss([math.log(1.5), math.log(0.5), math.log(1.1)], [0.0, 0.0, 0.0],
                      [1.0, -1.0, 1.0], [1.0, 1.0, 1.0])
    terms.loss.backward()
    # ratio 1.5 with A>0 and ratio 0.5 with A<0 are clipped; ratio 1.1 is inside the range
    assert lp.grad[0, 0] == 0.0 and lp.grad[0, 1] == 0.0
    assert lp.grad[0, 2] == pytest.approx(-1.1 / 3)
    assert terms.clip_fraction == 2.0
    assert terms.logprob_mismatch == pytest.approx(math.log(1.5) + math.log(2) + math.log(1.1))


def test_masked_tokens_do_not_contribute() -> None:
    terms, lp = _loss([-1.0, -1.0], [-1.0, -1.0], [1.0, 1.0], [1.0, 0.0])
    terms.loss.backward()
    assert lp.grad[0, 1] == 0.0 and lp.grad[0, 0] != 0.0


def test_the_loss_is_a_share_of_the_whole_step() -> None:
    """Two micro-batches of a 4-token step: their shares add up to the step's token mean."""
    step = StepInfo(sequences=2, tokens=4.0, max_response_len=2)
    first, _ = _loss([-1.0, -1.0], [-1.0, -1.0], [1.0, 1.0], [1.0, 1.0], step=step)
    second, _ = _loss([-1.0, -1.0], [-1.0, -1.0], [3.0, 3.0], [1.0, 1.0], step=step)
    assert first.loss.item() + second.loss.item() == pytest.approx(-(1 + 1 + 3 + 3) / 4)


def test_kl_is_k3_and_enters_the_loss_only_with_a_coefficient() -> None:
    args = ([-1.0, -2.0], [-1.0, -2.0], [0.0, 0.0], [1.0, 1.0])
    ref = torch.tensor([[-1.5, -2.0]])
    without, _ = _loss(*args, ref_logprobs=ref, kl_coef=0.0)
    with_kl, _ = _loss(*args, ref_logprobs=ref, kl_coef=0.5)
    expected = math.exp(-0.5) + 0.5 - 1.0
    assert without.kl == pytest.approx(expected) and with_kl.kl == pytest.approx(expected)
    assert without.loss.item() == 0.0
    assert with_kl.loss.item() == pytest.approx(0.5 * expected / 2)


def test_entropy_bonus_lowers_the_loss() -> None:
    args = ([-1.0], [-1.0], [0.0], [1.0])
    entropy = torch.tensor([[2.0]])
    assert _loss(*args, entropy=entropy, entropy_coef=0.1)[0].loss.item() == pytest.approx(-0.2)
    assert _loss(*args, entropy=entropy)[0].entropy == 2.0


def test_truncated_importance_sampling_weights_each_token() -> None:
    """Trainer logprobs [-1, -2], engine [-1.5, -1]: ratios e^0.5 = 1.649 and e^-1 = 0.368;
    capped at 1.5 the weights are [1.5, 0.368]. The PPO ratio is taken against the trainer's
    own logprobs (1 on this single step), so the loss is -mean(w * A)."""
    terms, lp = _loss([-1.0, -2.0], [-1.5, -1.0], [1.0, 1.0], [1.0, 1.0], tis_cap=1.5)
    weights = [1.5, math.exp(-1.0)]
    assert terms.loss.item() == pytest.approx(-sum(weights) / 2)
    terms.loss.backward()
    assert lp.grad[0].tolist() == pytest.approx([-w / 2 for w in weights])
    assert terms.tis_ratio == pytest.approx(math.exp(0.5) + math.exp(-1.0))
    assert terms.tis_truncated == 1.0
    assert terms.tis_ratio_max == pytest.approx(math.exp(0.5))
    assert terms.clip_fraction == 0.0  # the trust region is against the trainer's old policy
    off, _ = _loss([-1.0, -2.0], [-1.5, -1.0], [1.0, 1.0], [1.0, 1.0])
    assert off.tis_ratio == 0.0 and off.tis_ratio_max == 0.0


def test_truncated_importance_sampling_ignores_padding() -> None:
    # a padded position has no engine logprob (0): its ratio must not reach the loss
    terms, _ = _loss([-1.0, -30.0], [-1.0, 0.0], [1.0, 1.0], [1.0, 0.0], tis_cap=2.0)
    assert terms.loss.item() == pytest.approx(-1.0)
    assert terms.tis_ratio_max == pytest.approx(1.0) and terms.tis_truncated == 0.0


class _Broken(Algorithm):
    name = "broken"

    def __init__(self, per_token=None, aggregate=None, error=None) -> None:
        super().__init__()
        self._per_token, self._aggregate, self._error = per_token, aggregate, error

    def advantages(self, samples, step):
        return [0.0] * len(samples)

    def policy_loss(self, batch):
        if self._error:
            raise self._error
        if self._per_token is not None:
            return PolicyLoss(self._per_token(batch))
        return PolicyLoss(-batch.advantages * batch.logprobs)

    def aggregate(self, per_token, mask, step):
        if self._aggregate is not None:
            return self._aggregate(per_token)
        return super().aggregate(per_token, mask, step)


@pytest.mark.parametrize(("algorithm", "message"), [
    (_Broken(per_token=lambda b: b.logprobs * float("nan")), "the policy loss is nan"),
    (_Broken(aggregate=lambda t: t.sum(-1)), r"not a scalar \(shape \(1,\)\)"),
    (_Broken(aggregate=lambda t: 0.5), r"not a scalar \(shape float\)"),
    (_Broken(per_token=lambda b: b.logprobs.sum(-1)), r"per-token loss of shape \(1,\)"),
    (_Broken(error=RuntimeError("boom")), "the policy loss raised RuntimeError: boom"),
])
def test_an_unusable_policy_loss_is_a_loss_problem(algorithm: Algorithm, message: str) -> None:
    with pytest.raises(LossProblem, match=message):
        _loss([-1.0, -2.0], [-1.0, -2.0], [1.0, 1.0], [1.0, 1.0], algorithm=algorithm)
