"""Every shipped algorithm trains the tiny model on Megatron, and truncated importance sampling
reports its ratio statistics."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from rollyard import Sample
from rollyard.training import TrainConfig, TrainGroup

VOCAB = 512


def make_samples(groups: int, per_group: int, seed: int) -> list[Sample]:
    """Random prompts and responses of 3-8 tokens; rewards 1, 0, 1, 0 … in each group."""
    rng = random.Random(seed)
    samples = []
    for g in range(groups):
        for j in range(per_group):
            prompt_len, response_len = rng.randint(2, 5), rng.randint(3, 8)
            tokens = [rng.randrange(VOCAB) for _ in range(prompt_len + response_len)]
            samples.append(Sample(tokens=tokens, prompt_len=prompt_len,
                                  loss_mask=[1] * response_len, logprobs=[-1.0] * response_len,
                                  reward=float(j % 2), group_id=f"g{g}", task_id=f"t{g}"))
    return samples


def on_policy(group: TrainGroup, samples: list[Sample]) -> list[list[float]]:
    """Give the samples the policy's own logprobs, as a freshly synced engine would."""
    logprobs = group.logprobs(samples)
    for sample, values in zip(samples, logprobs):
        sample.logprobs = [min(v, 0.0) for v in values]
    return logprobs


@pytest.mark.slow
@pytest.mark.parametrize(("algorithm", "options"), [
    ("grpo", {}),
    ("dr-grpo", {}),
    ("dapo", {"overlong_buffer": 4}),
    ("gspo", {}),
    ("rloo", {}),
])
def test_algorithm_trains_the_policy(algorithm: str, options: dict, tiny_model_dir: Path,
                                     ray_session: object) -> None:
    config = TrainConfig(lr=1e-2, algorithm=algorithm, algorithm_options=options,
                         max_new_tokens=8, micro_batch_size=8)
    with TrainGroup(str(tiny_model_dir), config, tp=1, dp=1) as group:
        assert group.algorithm.name == algorithm
        samples = make_samples(2, 4, seed=0)
        before = on_policy(group, samples)
        steps = [group.train(samples) for _ in range(2)]
        for metrics in steps:
            assert math.isfinite(metrics["loss"]) and math.isfinite(metrics["policy_loss"])
            assert metrics["num_samples_trained"] == 8 and metrics["entropy"] > 0
            assert metrics["zero_variance_share"] == 0
        # on policy the first step has a gradient; after it gspo may clip every sample
        assert steps[0]["grad_norm"] > 0
        after = group.logprobs(samples)
    change = max(abs(a - b) for x, y in zip(after, before) for a, b in zip(x, y))
    assert change > 1e-3, f"{algorithm}: the policy did not change"
    rewarded = [(a, b) for a, b, s in zip(after, before, samples) if s.reward == 1.0]
    assert sum(sum(a) - sum(b) for a, b in rewarded) > 0  # rewarded answers became likelier


@pytest.mark.slow
def test_truncated_importance_sampling_reports_its_ratios(tiny_model_dir: Path,
                                                          ray_session: object) -> None:
    """The engine's logprobs sit 0.3 or 0.6 below the trainer's: ratios e^0.3 = 1.35 (kept)
    and e^0.6 = 1.82 (truncated at 1.5); zero-variance groups are counted."""
    config = TrainConfig(lr=1e-2, tis_cap=1.5, micro_batch_size=8)
    with TrainGroup(str(tiny_model_dir), config, tp=1, dp=1) as group:
        samples = make_samples(2, 4, seed=1)
        flat = make_samples(1, 2, seed=2)
        for sample in flat:
            sample.reward, sample.group_id = 1.0, "flat"
        trainer = group.logprobs(samples)
        for sample, values in zip(samples, trainer):
            sample.logprobs = [v - (0.3 if i % 2 else 0.6) for i, v in enumerate(values)]
        metrics = group.train(samples + flat)
    assert metrics["tis_ratio_max"] == pytest.approx(math.exp(0.6), rel=1e-3)
    assert 0.3 < metrics["tis_truncated"] < 0.7
    assert math.exp(0.3) < metrics["tis_ratio_mean"] < math.exp(0.6)
    assert metrics["clip_fraction"] == 0  # the PPO ratio is against the trainer's own policy
    assert metrics["logprob_mismatch"] > 0.3
    assert metrics["num_groups_filtered"] == 1 and metrics["zero_variance_share"] == 1 / 3
    assert math.isfinite(metrics["loss"]) and metrics["update_skipped"] == 0
