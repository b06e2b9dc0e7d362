"""A third-party algorithm installed with pip is found by its entry point in the driver and in
every training rank; a plugin whose loss is NaN or not a scalar fails the step by name and
leaves the weights untouched."""

from __future__ import annotations

import importlib
import math
import random
import re
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rollyard import PluginError, Sample
from rollyard.training import TrainConfig, TrainGroup
from rollyard.training.hf_folder import load_hf_weights
from test_entry_point_install import PYPROJECT, pip

PLUGIN = '''
from dataclasses import dataclass, field

from rollyard import Algorithm, hookimpl
from rollyard.algorithms import PolicyLoss, group_centred


@dataclass(frozen=True)
class SignOptions:
    scale: float = field(default=1.0, metadata={{"help": "size of every advantage"}})

    def __post_init__(self):
        if not self.scale > 0:
            raise ValueError(f"scale is {{self.scale!r}}; it must be positive")


class SignPolicyGradient(Algorithm):
    """REINFORCE on the sign of the centred reward: A = scale * sign(r - mean)."""

    name = "{prefix}-sign"
    Options = SignOptions

    def advantages(self, samples, step):
        centred = group_centred([s.reward for s in samples], [s.group_id for s in samples])
        return [self.options.scale * ((a > 0) - (a < 0)) for a in centred]

    def policy_loss(self, batch):
        return PolicyLoss(-batch.advantages * batch.logprobs)


class NanOnLongBatches(SignPolicyGradient):
    """NaN as soon as a micro-batch holds a response longer than 8 tokens (so only one rank
    fails)."""

    name = "{prefix}-nan"

    def policy_loss(self, batch):
        loss = super().policy_loss(batch)
        if batch.mask.shape[1] > 8:
            loss.per_token = loss.per_token * float("nan")
        return loss


class VectorLoss(SignPolicyGradient):
    """Forgets to reduce: one loss per sample."""

    name = "{prefix}-vector"

    def aggregate(self, per_token, mask, step):
        return (per_token * mask).sum(-1)


@hookimpl
def register_algorithms(register):
    for cls in (SignPolicyGradient, NanOnLongBatches, VectorLoss):
        register(cls)
'''


@pytest.fixture(scope="module")
def third_party(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A throwaway distribution registering three algorithms, pip-installed (not editable,
    so that Ray workers started before the install find it too); yields (prefix, dist)."""
    tag = uuid.uuid4().hex[:8]
    dist, module = f"rollyard-throwaway-alg-{tag}", f"rollyard_throwaway_alg_{tag}"
    prefix = f"throwaway{tag}"
    project = tmp_path_factory.mktemp("alg") / dist
    (project / module).mkdir(parents=True)
    (project / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT).format(
        dist=dist, entry_point=f"alg{tag}", module=module))
    (project / module / "__init__.py").write_text("")
    (project / module / "plugin.py").write_text(PLUGIN.format(prefix=prefix))
    installed = pip("install", "--no-deps", "--no-build-isolation", "-q", str(project))
    assert installed.returncode == 0, installed.stderr
    importlib.invalidate_caches()
    try:
        yield prefix, dist
    finally:
        removed = pip("uninstall", "-y", "-q", dist)
        assert removed.returncode == 0, removed.stderr


def make_samples(lengths: list[int], seed: int) -> list[Sample]:
    """One group; prompts of 2 tokens, responses of ``lengths``; rewards 1, 0, 1, 0 …"""
    rng = random.Random(seed)
    return [Sample(tokens=[rng.randrange(512) for _ in range(2 + n)], prompt_len=2,
                   loss_mask=[1] * n, logprobs=[-1.0] * n, reward=float(i % 2 == 0),
                   group_id="g", task_id="t")
            for i, n in enumerate(lengths)]


@pytest.mark.slow
def test_a_pip_installed_algorithm_trains_through_the_train_group(
        third_party: tuple[str, str], tiny_model_dir: Path, ray_session: object) -> None:
    prefix, _ = third_party
    config = TrainConfig(lr=1e-2, algorithm=f"{prefix}-sign",
                         algorithm_options={"scale": 2.0})
    with TrainGroup(str(tiny_model_dir), config, tp=1, dp=1) as group:
        assert group.algorithm.options.scale == 2.0  # resolved in the driver, too
        samples = make_samples([3, 5, 4, 6], seed=0)
        before = group.logprobs(samples)
        for _ in range(2):
            metrics = group.train(samples)
            assert math.isfinite(metrics["loss"]) and metrics["num_samples_trained"] == 4
        after = group.logprobs(samples)
    gained = sum(sum(a) - sum(b) for a, b, s in zip(after, before, samples) if s.reward)
    assert gained > 0


@pytest.mark.slow
@pytest.mark.parametrize(("suffix", "dp", "problem"), [
    ("nan", 2, r"\(training rank 0\): the policy loss is nan"),
    ("vector", 1, r"\(training rank 0\): the policy loss is not a scalar \(shape \(4,\)\)"),
])
def test_a_broken_loss_fails_the_step_by_name_and_writes_nothing(
        suffix: str, dp: int, problem: str, third_party: tuple[str, str], tiny_model_dir: Path,
        ray_session: object, tmp_path: Path) -> None:
    prefix, dist = third_party
    config = TrainConfig(lr=1e-2, algorithm=f"{prefix}-{suffix}", micro_batch_size=4)
    # dp=2: the one long sample goes to rank 0, whose batch alone turns NaN; rank 1 must
    # not wait for it in a collective, and must not apply its own update either
    samples = make_samples([12, 3, 4, 3, 4, 3], seed=1) if dp == 2 else make_samples(
        [3, 5, 4, 6], seed=1)
    with TrainGroup(str(tiny_model_dir), config, tp=1, dp=dp) as group:
        before = load_hf_weights(group.export_hf(str(tmp_path / "before")))
        with pytest.raises(PluginError) as failure:
            group.train(samples)
        after = load_hf_weights(group.export_hf(str(tmp_path / "after")))
    message = str(failure.value)
    assert f"algorithm '{prefix}-{suffix}'" in message and f"distribution '{dist}'" in message
    assert "the step was not applied to the weights" in message
    assert re.search(problem, message), message
    assert all(before[name].equal(after[name]) for name in before)
