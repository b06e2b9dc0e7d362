"""GRPO advantages and the PPO-clip loss, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from rollyard.training.algorithm import grpo_advantages, ppo_clip_loss, token_logprobs


def test_grpo_advantages_are_normalised_within_each_group() -> None:
    adv = grpo_advantages([1.0, 0.0, 3.0, 1.0], ["a", "a", "b", "b"], eps=0.0)
    assert adv.values == pytest.approx([1.0, -1.0, 1.0, -1.0])
    assert adv.keep == [True] * 4
    assert (adv.num_groups, adv.num_groups_filtered) == (2, 0)


def test_grpo_without_std_scaling_only_centres() -> None:
    adv = grpo_advantages([2.0, 0.0, 1.0], ["g"] * 3, scale_by_std=False)
    assert adv.values == pytest.approx([1.0, -1.0, 0.0])


def test_zero_variance_groups_are_filtered_or_zeroed() -> None:
    rewards, groups = [1.0, 1.0, 0.0, 1.0], ["same", "same", "mixed", "mixed"]
    filtered = grpo_advantages(rewards, groups, filter_zero_variance=True)
    assert filtered.keep == [False, False, True, True]
    assert filtered.num_groups_filtered == 1
    kept = grpo_advantages(rewards, groups, filter_zero_variance=False)
    assert kept.keep == [True] * 4 and kept.values[:2] == [0.0, 0.0]
    assert kept.num_groups_filtered == 0


def test_grpo_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="2 rewards for 1 group ids"):
        grpo_advantages([1.0, 0.0], ["g"])


def test_token_logprobs_use_the_engine_definition() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7)
    targets = torch.randint(0, 7, (2, 3))
    chosen, entropy = token_logprobs(logits, targets, temperature=0.7)
    manual = torch.log_softmax(logits / 0.7, dim=-1)
    assert torch.allclose(chosen, manual.gather(-1, targets.unsqueeze(-1)).squeeze(-1))
    assert torch.allclose(entropy, -(manual.exp() * manual).sum(-1))


def _loss(logprobs, old, adv, mask, **kw):
    return ppo_clip_loss(torch.tensor([logprobs], requires_grad=True), torch.tensor([old]),
                         torch.tensor([adv]), torch.tensor([mask]), clip_eps=0.2, **kw)


def test_on_policy_loss_is_minus_the_masked_advantage_sum() -> None:
    terms = _loss([-1.0, -2.0, -3.0], [-1.0, -2.0, -3.0], [2.0, -1.0, 5.0], [1.0, 1.0, 0.0])
    assert terms.loss.item() == pytest.approx(-(2.0 - 1.0))
    assert terms.tokens == 2.0 and terms.logprob_mismatch == 0.0 and terms.clip_fraction == 0.0


def test_clipped_tokens_get_no_gradient() -> None:
    lp = torch.tensor([[math.log(1.5), math.log(0.5), math.log(1.1)]], requires_grad=True)
    terms = ppo_clip_loss(lp, torch.zeros(1, 3), torch.tensor([[1.0, -1.0, 1.0]]),
                          torch.ones(1, 3), clip_eps=0.2)
    terms.loss.backward()
    # ratio 1.5 with A>0 and ratio 0.5 with A<0 are clipped; ratio 1.1 is inside the range
    assert lp.grad[0, 0] == 0.0 and lp.grad[0, 1] == 0.0
    assert lp.grad[0, 2] == pytest.approx(-1.1)
    assert terms.clip_fraction == 2.0
    assert terms.logprob_mismatch == pytest.approx(math.log(1.5) + math.log(2) + math.log(1.1))


def test_masked_tokens_do_not_contribute() -> None:
    lp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    ppo_clip_loss(lp, torch.tensor([[-1.0, -1.0]]), torch.tensor([[1.0, 1.0]]),
                  torch.tensor([[1.0, 0.0]]), clip_eps=0.2).loss.backward()
    assert lp.grad[0, 1] == 0.0 and lp.grad[0, 0] != 0.0


def test_kl_is_k3_and_enters_the_loss_only_with_a_coefficient() -> None:
    args = ([-1.0, -2.0], [-1.0, -2.0], [0.0, 0.0], [1.0, 1.0])
    ref = torch.tensor([[-1.5, -2.0]])
    without = _loss(*args, ref_logprobs=ref, kl_coef=0.0)
    with_kl = _loss(*args, ref_logprobs=ref, kl_coef=0.5)
    expected = math.exp(-0.5) + 0.5 - 1.0
    assert without.kl == pytest.approx(expected) and with_kl.kl == pytest.approx(expected)
    assert without.loss.item() == 0.0
    assert with_kl.loss.item() == pytest.approx(0.5 * expected)


def test_entropy_bonus_lowers_the_loss() -> None:
    args = ([-1.0], [-1.0], [0.0], [1.0])
    entropy = torch.tensor([[2.0]])
    assert _loss(*args, entropy=entropy, entropy_coef=0.1).loss.item() == pytest.approx(-0.2)
    assert _loss(*args, entropy=entropy).entropy == 2.0
