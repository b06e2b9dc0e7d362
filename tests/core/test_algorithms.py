"""The shipped algorithm plugins against hand-computed examples, their options, and how an
algorithm is registered and found by name."""

from __future__ import annotations

import dataclasses
import math
import types

import pytest
import torch
from rollyard import Algorithm, ConfigError, PluginError, Sample, UnknownPluginError, hookimpl
from rollyard.algorithms import (
    NoOptions,
    PolicyLoss,
    StepInfo,
    group_centred,
    leave_one_out,
)
from rollyard.training import TrainConfig
from rollyard.training.algorithm import load_algorithm, micro_batch_loss
from rollyard_plugins.algorithms.dapo import DAPO, overlong_penalty
from rollyard_plugins.algorithms.dr_grpo import DrGRPO
from rollyard_plugins.algorithms.grpo import GRPO
from rollyard_plugins.algorithms.gspo import GSPO
from rollyard_plugins.algorithms.rloo import RLOO

STEP = StepInfo(sequences=4, tokens=8.0, max_response_len=10)


def samples(rewards: list[float], groups: list[str], lengths: list[int] | None = None,
            ) -> list[Sample]:
    lengths = lengths or [2] * len(rewards)
    return [Sample(tokens=[1] + [2] * n, prompt_len=1, loss_mask=[1] * n, logprobs=[-1.0] * n,
                   reward=r, group_id=g, task_id=g)
            for r, g, n in zip(rewards, groups, lengths, strict=True)]


def loss(algorithm: Algorithm, logprobs: list[list[float]], old: list[list[float]],
         advantages: list[float], mask: list[list[float]], step: StepInfo):
    """The step loss of one micro-batch of rows, and the gradient on the logprobs."""
    lp = torch.tensor(logprobs, requires_grad=True)
    adv = torch.tensor(advantages)[:, None].expand(lp.shape)
    terms = micro_batch_loss(algorithm, lp, torch.tensor(old), adv, torch.tensor(mask), step)
    terms.loss.backward()
    return terms, lp.grad


# --------------------------------------------------------------------------- grpo


def test_grpo_advantages_are_normalised_within_each_group() -> None:
    adv = GRPO().advantages(samples([1.0, 0.0, 3.0, 1.0], ["a", "a", "b", "b"]), STEP)
    assert adv == pytest.approx([1.0, -1.0, 1.0, -1.0], abs=1e-5)
    assert group_centred([1.0, 0.0], ["a", "a"], eps=0.0) == [1.0, -1.0]


def test_grpo_without_std_scaling_only_centres() -> None:
    grpo = GRPO(GRPO.Options(scale_by_std=False))
    assert grpo.advantages(samples([2.0, 0.0, 1.0], ["g"] * 3), STEP) == [1.0, -1.0, 0.0]


def test_grpo_gives_zero_advantage_to_a_group_of_equal_rewards() -> None:
    assert GRPO().advantages(samples([1.0, 1.0], ["g", "g"]), STEP) == [0.0, 0.0]


def test_grpo_loss_is_the_token_mean_of_the_clipped_objective() -> None:
    """Ratios 1.5 (A = 1, clipped at 1.2) and 1.1 (A = 1); 2 tokens in the step."""
    terms, grad = loss(GRPO(), [[math.log(1.5), math.log(1.1)]], [[0.0, 0.0]], [1.0],
                       [[1.0, 1.0]], StepInfo(1, 2.0, 2))
    assert terms.loss.item() == pytest.approx(-(1.2 + 1.1) / 2)
    assert grad[0].tolist() == pytest.approx([0.0, -1.1 / 2])
    assert terms.clip_fraction == 1.0


# --------------------------------------------------------------------------- dr-grpo


def test_dr_grpo_advantages_are_centred_not_scaled() -> None:
    adv = DrGRPO().advantages(samples([1.0, 0.0, 0.0, 0.0], ["g"] * 4), STEP)
    assert adv == [0.75, -0.25, -0.25, -0.25]


def test_dr_grpo_divides_the_token_sum_by_max_length_times_samples() -> None:
    """Rows of 2 and 1 trained tokens, A = 1 and 0.5, on policy: -(2 + 0.5) / (4 * 2)."""
    step = StepInfo(sequences=2, tokens=3.0, max_response_len=4)
    terms, grad = loss(DrGRPO(), [[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]],
                       [[-1.0, -1.0, 0.0], [-1.0, 0.0, 0.0]], [1.0, 0.5],
                       [[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], step)
    assert terms.loss.item() == pytest.approx(-2.5 / 8)
    # every token weighs the same whatever its sample's length
    assert grad.flatten().tolist() == pytest.approx([-1 / 8, -1 / 8, 0.0, -0.5 / 8, 0.0, 0.0])


# --------------------------------------------------------------------------- dapo


def test_dapo_clips_higher_above_than_below() -> None:
    """Ratio 1.25 with A = 1 is inside 1 + 0.28; ratio 0.75 with A = -1 is clipped at 0.8."""
    terms, grad = loss(DAPO(DAPO.Options(clip_low=0.2, clip_high=0.28)),
                       [[math.log(1.25)], [math.log(0.75)]], [[0.0], [0.0]], [1.0, -1.0],
                       [[1.0], [1.0]], StepInfo(2, 2.0, 1))
    assert terms.loss.item() == pytest.approx((-1.25 + 0.8) / 2)
    assert grad[:, 0].tolist() == pytest.approx([-1.25 / 2, 0.0])
    assert terms.clip_fraction == 1.0


def test_dapo_loss_is_a_mean_over_all_tokens_of_the_step() -> None:
    step = StepInfo(sequences=2, tokens=3.0, max_response_len=4)
    terms, _ = loss(DAPO(), [[-1.0, -1.0], [-1.0, -1.0]], [[-1.0, -1.0], [-1.0, 0.0]],
                    [1.0, 0.5], [[1.0, 1.0], [1.0, 0.0]], step)
    assert terms.loss.item() == pytest.approx(-(1 + 1 + 0.5) / 3)


def test_dapo_overlong_penalty_is_soft_inside_the_buffer() -> None:
    # max 10 tokens, buffer 4: free up to 6, then a linear penalty down to -1 at 10
    assert [overlong_penalty(n, 10, 4, 1.0) for n in (6, 8, 10, 11)] == [0.0, -0.5, -1.0, -1.0]
    assert overlong_penalty(10, 10, 0, 1.0) == 0.0  # buffer 0: off


def test_dapo_shapes_rewards_before_normalising() -> None:
    """Both answers right (reward 1), lengths 6 and 8 of at most 10 with a buffer of 4:
    shaped rewards 1 and 0.5, so the shorter answer is preferred."""
    dapo = DAPO(DAPO.Options(overlong_buffer=4))
    adv = dapo.advantages(samples([1.0, 1.0], ["g", "g"], lengths=[6, 8]),
                          StepInfo(2, 14.0, max_response_len=10))
    assert adv == pytest.approx([1.0, -1.0], abs=1e-5)
    off = DAPO(DAPO.Options(overlong_buffer=0))
    assert off.advantages(samples([1.0, 1.0], ["g", "g"], [6, 8]), STEP) == [0.0, 0.0]


def test_dapo_shapes_no_length_by_default_and_none_means_half_the_budget() -> None:
    """Budget 10: by default equal rewards stay equal whatever the lengths; an unset buffer
    (configurations saved before the default was off) is 5: lengths 4 and 8 shape to 1 and
    1 - 3/5 = 0.4."""
    step = StepInfo(2, 12.0, max_response_len=10)
    assert DAPO().advantages(samples([1.0, 1.0], ["g", "g"], lengths=[4, 8]), step) == [0.0, 0.0]
    half = DAPO(DAPO.Options(overlong_buffer=None))
    adv = half.advantages(samples([1.0, 1.0], ["g", "g"], lengths=[4, 8]), step)
    assert adv == pytest.approx([1.0, -1.0], abs=1e-5)
    adv = half.advantages(samples([1.0, 1.0], ["g", "g"], lengths=[2, 5]),
                          StepInfo(2, 7.0, max_response_len=10))
    assert adv == [0.0, 0.0]  # both inside the free half


def test_dapo_kl_cov_holds_the_highest_covariance_token_with_a_kl_penalty() -> None:
    """Log-probs -0.1, -2.0 (A = 1) and -0.5, -1.0 (A = -1): mean -0.9 and 0, so the covariance
    terms are 0.8, -1.1, -0.4 and 0.1. A share of 1/4 holds the first token: its loss is
    -ρA + |Δ| = -e^0.1 + 0.1 (gradient -e^0.1 + 1) instead of the clipped -e^0.1 (gradient
    -e^0.1). The rest keep the clipped loss (ratio 1: -1, 1, 1). Mean over 4 tokens."""
    logprobs, old = [[-0.1, -2.0], [-0.5, -1.0]], [[-0.2, -2.0], [-0.5, -1.0]]
    step, mask = StepInfo(2, 4.0, 2), [[1.0, 1.0], [1.0, 1.0]]
    held, grad = loss(DAPO(DAPO.Options(kl_cov_ratio=0.25)), logprobs, old, [1.0, -1.0], mask,
                      step)
    assert held.loss.item() == pytest.approx((-math.exp(0.1) + 0.1 - 1 + 1 + 1) / 4, abs=1e-6)
    assert grad.flatten().tolist() == pytest.approx([(1 - math.exp(0.1)) / 4, -0.25, 0.25, 0.25])
    plain, grad = loss(DAPO(), logprobs, old, [1.0, -1.0], mask, step)
    assert plain.loss.item() == pytest.approx((-math.exp(0.1) - 1 + 1 + 1) / 4)
    assert grad[0, 0].item() == pytest.approx(-math.exp(0.1) / 4)


def test_dapo_kl_cov_holds_a_share_of_the_trained_tokens_only() -> None:
    """Mean log-prob -1.4 over the four trained tokens: covariance terms 1.3, -1.6, -0.9 and
    0.6. Half of them are the two positive ones; all of them are still those two (padding and
    negative terms are never held); equal advantages hold nothing."""
    from rollyard_plugins.algorithms.dapo import high_covariance_tokens

    logprobs = torch.tensor([[-0.1, -3.0, 0.0], [-0.5, -2.0, 0.0]])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    two = [[True, False, False], [False, True, False]]
    assert high_covariance_tokens(logprobs, advantages, mask, 0.5).tolist() == two
    assert high_covariance_tokens(logprobs, advantages, mask, 1.0).tolist() == two
    assert high_covariance_tokens(logprobs, advantages, mask, 0.25).tolist() == [
        [True, False, False], [False, False, False]]
    assert not high_covariance_tokens(logprobs, torch.ones(2, 3), mask, 1.0).any()


def test_dapo_dynamic_sampling_decides_the_filtering() -> None:
    assert DAPO().filters_zero_variance is True
    assert DAPO(DAPO.Options(dynamic_sampling=False)).filters_zero_variance is False
    assert GRPO().filters_zero_variance is None  # the run's setting


# --------------------------------------------------------------------------- gspo


def test_gspo_clips_the_geometric_mean_ratio_of_each_sample() -> None:
    """Row 1: log-ratios 0.1 and 0.3 (the masked third is ignored) give s = e^0.2, clipped at
    1 + 4e-4 with A = 1, so no gradient. Row 2: s = e^0 = 1, A = -0.5. Mean over 2 samples."""
    step = StepInfo(sequences=2, tokens=4.0, max_response_len=3)
    terms, grad = loss(GSPO(), [[0.1, 0.3, 5.0], [1e-4, -1e-4, 0.0]], [[0.0, 0.0, 0.0]] * 2,
                       [1.0, -0.5], [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]], step)
    assert terms.loss.item() == pytest.approx((-(1 + 4e-4) + 0.5) / 2)
    assert grad[0].tolist() == [0.0, 0.0, 0.0]
    # d/dlp of -A * exp(mean(lp - old)) / 2 at s = 1: 0.5 / 2 / 2 tokens on each token
    assert grad[1, :2].tolist() == pytest.approx([0.125, 0.125])
    assert terms.clip_fraction == 2.0  # both tokens of the clipped sample


# --------------------------------------------------------------------------- rloo


def test_rloo_compares_each_sample_with_the_others_of_its_group() -> None:
    adv = RLOO().advantages(samples([1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 5.0],
                                    ["a", "a", "a", "a", "b", "b", "c"]), STEP)
    assert adv == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3, 2.0, -2.0, 0.0])
    assert leave_one_out([3.0], ["alone"]) == [0.0]


def test_rloo_loss_on_policy_is_reinforce() -> None:
    terms, grad = loss(RLOO(), [[-1.0, -2.0]], [[-1.0, -2.0]], [2 / 3], [[1.0, 1.0]],
                       StepInfo(1, 2.0, 2))
    assert terms.loss.item() == pytest.approx(-2 / 3)
    assert grad[0].tolist() == pytest.approx([-1 / 3, -1 / 3])


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(("make", "message"), [
    (lambda: GRPO.Options(clip_eps=-0.1), "clip_eps is -0.1"),
    (lambda: DrGRPO.Options(clip_eps=1.5), "clip_eps is 1.5; it must be below 1"),
    (lambda: DAPO.Options(clip_low=-0.2), "clip_low is -0.2"),
    (lambda: DAPO.Options(clip_high=float("nan")), "clip_high is nan"),
    (lambda: DAPO.Options(clip_low=0.3, clip_high=0.2), "clip_low=0.3 is greater than "
                                                         "clip_high=0.2"),
    (lambda: GSPO.Options(clip_low=4e-3, clip_high=3e-3), "clip_low=0.004 is greater"),
    (lambda: DAPO.Options(overlong_buffer=-1), "overlong_buffer is -1"),
    (lambda: DAPO.Options(kl_cov_ratio=1.5), "kl_cov_ratio is 1.5"),
    (lambda: DAPO.Options(kl_cov_coef=-1.0), "kl_cov_coef is -1.0"),
    (lambda: RLOO.Options(clip_eps=-1.0), "clip_eps is -1.0"),
])
def test_bad_algorithm_options_name_the_field(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_options_are_frozen_dataclasses_with_help() -> None:
    for cls in (GRPO, DrGRPO, DAPO, GSPO, RLOO):
        assert dataclasses.is_dataclass(cls.Options) and cls.Options.__dataclass_params__.frozen
        for f in dataclasses.fields(cls.Options):
            assert f.metadata.get("help"), f"{cls.name}.{f.name} has no help"
    assert DAPO(DAPO.Options(clip_high=0.3)).options.clip_high == 0.3


def test_an_algorithm_takes_only_its_own_options() -> None:
    with pytest.raises(TypeError, match="algorithm 'dapo' takes DAPOOptions options"):
        DAPO(GRPO.Options())


def test_an_algorithm_without_options_gets_an_empty_frozen_dataclass() -> None:
    class Plain(Algorithm):
        name = "plain"

        def advantages(self, samples, step):
            return [0.0] * len(samples)

        def policy_loss(self, batch):
            return PolicyLoss(batch.logprobs * 0)

    assert isinstance(Plain().options, NoOptions)
    assert dataclasses.fields(Plain.Options) == ()


def test_algorithm_is_abstract() -> None:
    with pytest.raises(TypeError, match="abstract"):
        Algorithm()


# --------------------------------------------------------------------------- finding one


def test_shipped_algorithms_load_by_name_with_their_options() -> None:
    algorithm, plugin = load_algorithm(TrainConfig(algorithm="dapo",
                                                   algorithm_options={"clip_high": 0.3}))
    assert isinstance(algorithm, DAPO) and algorithm.options.clip_high == 0.3
    assert (plugin.name, plugin.distribution) == ("algorithms", "rollyard")


def test_unknown_algorithm_lists_the_nearest_match() -> None:
    with pytest.raises(UnknownPluginError, match=r"no algorithm named 'dapoo'.*"
                                                 r"available: dapo, dr-grpo, grpo, gspo, rloo"
                                                 r".*Did you mean 'dapo'\?"):
        load_algorithm(TrainConfig(algorithm="dapoo"))


def test_an_option_of_another_algorithm_is_named() -> None:
    with pytest.raises(ConfigError, match=r"algorithm 'grpo': unknown option \[grpo\] "
                                          r"'clip_high' .*; known: clip_eps, scale_by_std"):
        load_algorithm(TrainConfig(algorithm="grpo", algorithm_options={"clip_high": 0.3}))


def test_the_trainer_decodes_algorithm_options_with_their_checks() -> None:
    # the training ranks decode the plain data as a flag would be: a type the dataclass
    # itself would take silently is refused, naming the algorithm and the option
    with pytest.raises(ConfigError, match=r"algorithm 'grpo': \[grpo\] 'scale_by_std': "
                                          r"expected bool, got 'yes'"):
        load_algorithm(TrainConfig(algorithm="grpo", algorithm_options={"scale_by_std": "yes"}))


def test_a_bad_option_value_is_a_config_error_naming_the_algorithm() -> None:
    with pytest.raises(ConfigError, match=r"algorithm 'dapo': clip_low=0\.5 is greater"):
        load_algorithm(TrainConfig(algorithm="dapo", algorithm_options={"clip_low": 0.5}))


def test_clip_eps_of_the_train_config_fills_the_algorithms_clip_eps() -> None:
    grpo, _ = load_algorithm(TrainConfig(algorithm="grpo", clip_eps=0.1))
    assert grpo.options.clip_eps == 0.1
    explicit, _ = load_algorithm(TrainConfig(algorithm="grpo", clip_eps=0.1,
                                             algorithm_options={"clip_eps": 0.3}))
    assert explicit.options.clip_eps == 0.3
    dapo, _ = load_algorithm(TrainConfig(algorithm="dapo", clip_eps=0.1))  # has no clip_eps
    assert dapo.options.clip_low == 0.2


@pytest.mark.parametrize("cap", [0.0, -1.0])
def test_tis_cap_must_be_positive(cap: float) -> None:
    with pytest.raises(ConfigError, match=f"TrainConfig.tis_cap {cap!r}: must be greater "
                                          "than 0"):
        TrainConfig(tis_cap=cap).validate()


def plugin_module(name: str, **hooks) -> types.ModuleType:
    module = types.ModuleType(name)
    for hook_name, function in hooks.items():
        setattr(module, hook_name, function)
    return module


def test_register_algorithms_adds_an_algorithm_by_name(plugin_manager) -> None:
    class Half(GRPO):
        name = "half-grpo"

    @hookimpl
    def register_algorithms(register):
        register(Half)

    record = plugin_manager.register(plugin_module("half", register_algorithms=register_algorithms),
                                     name="half")
    assert record.registers == {"algorithm": ["half-grpo"]} and record.errors == []
    assert plugin_manager.get("algorithm", "half-grpo") is Half
    algorithm, owner = load_algorithm(TrainConfig(algorithm="half-grpo"), plugin_manager)
    assert isinstance(algorithm, Half) and owner is record


def test_register_algorithms_rejects_a_class_that_is_not_an_algorithm(plugin_manager) -> None:
    @hookimpl
    def register_algorithms(register):
        register(dict)

    with pytest.warns(UserWarning, match="not a subclass of rollyard.Algorithm"):
        record = plugin_manager.register(
            plugin_module("bad", register_algorithms=register_algorithms), name="bad")
    assert record.errors and "algorithm" not in record.registers


def test_register_algorithms_duplicate_names_name_both_plugins(plugin_manager) -> None:
    def plugin(cls_name: str):
        @hookimpl
        def register_algorithms(register):
            register(type(cls_name, (GRPO,), {"name": "same"}))
        return plugin_module(cls_name, register_algorithms=register_algorithms)

    plugin_manager.register(plugin("A"), name="first", distribution="dist-a")
    plugin_manager.register(plugin("B"), name="second", distribution="dist-b")
    with pytest.raises(PluginError, match="algorithm name 'same' is registered by several "
                                          "distributions; say which: dist-a:same or "
                                          "dist-b:same"):
        plugin_manager.get("algorithm", "same")
    assert plugin_manager.get("algorithm", "dist-b:same").__qualname__ == "B"


def test_plugin_error_is_what_a_bad_plugin_raises() -> None:
    assert issubclass(UnknownPluginError, PluginError)
