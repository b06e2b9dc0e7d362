"""The trainer's settings: optimiser, schedule, loss and batching.

The settings a run also has are its :class:`~rollyard.config.RunConfig` options: their defaults
and checks are the run's (one source), and :meth:`TrainConfig.from_run` derives them from a run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any

from rollyard.config import RunConfig, core_specs
from rollyard.errors import ConfigError
from rollyard.options import OptionSpec

#: TrainConfig fields whose RunConfig option has another name (the others share theirs)
RUN_NAMES = {"warmup_steps": "lr_warmup_steps", "dtype": "train_dtype",
             "moe_aux_loss_coeff": "train_moe_aux_loss_coeff"}


def _run_default(name: str) -> Any:
    """The default of the RunConfig option behind TrainConfig field ``name``."""
    return RunConfig.__dataclass_fields__[RUN_NAMES.get(name, name)].default


@cache
def _shared() -> dict[str, OptionSpec]:
    """TrainConfig field name -> the spec of the RunConfig option it takes its value from."""
    specs = {spec.name: spec for spec in core_specs()}
    own = {"minibatches", "filter_zero_variance", "global_batch_size", "algorithm_options"}
    return {f.name: specs[RUN_NAMES.get(f.name, f.name)] for f in fields(TrainConfig)
            if f.name not in own and RUN_NAMES.get(f.name, f.name) in specs}


@dataclass
class TrainConfig:
    """Settings of the Megatron policy update; every field has a usable default (a field a run
    also has takes its RunConfig option's default and check).

    ``temperature`` must equal the sampling temperature of the rollouts (:meth:`from_run` takes
    it from there): recomputed logprobs are ``log_softmax(logits / temperature)`` of the
    sampled token, as in the engine.
    ``micro_batch_size`` counts samples per forward pass on one data-parallel rank;
    ``micro_batch_tokens``, when set, also bounds a forward pass's padded tokens (rows × the
    longest row), so short samples share a pass and long ones do not exhaust memory.
    ``share_prompts`` lets the samples of one prompt share an input row in which the prompt
    is computed once (:mod:`rollyard.training.batching`); the result is the same.
    ``minibatches`` splits a step's samples into that many optimizer updates (PPO epochs of
    one pass); the ratio of later ones is taken against the rollout's policy.
    ``global_batch_size``, when set, is the number of samples per step the run produces; it is
    checked against the data-parallel size up front.

    ``algorithm`` names a registered algorithm plugin and ``algorithm_options`` holds the values
    of its ``Options`` fields (plain data: every training rank rebuilds the options from it).
    ``clip_eps``, when set, fills a ``clip_eps`` option the dictionary leaves out (the
    ``--clip-eps`` of before algorithm plugins). ``filter_zero_variance`` drops groups whose
    rewards are all equal unless the algorithm decides that itself (dapo's dynamic sampling).
    ``tis_cap`` turns on truncated importance sampling against the engine's logprobs.
    ``max_new_tokens`` is the rollouts' response budget (dr-grpo's normaliser, dapo's
    overlong penalty); without it the step's longest response stands in.
    ``dtype`` is the precision of the parameters and activations: ``bf16`` keeps fp32 master
    weights in megatron-core's mixed-precision optimizer and reduces gradients in fp32.
    ``moe_aux_loss_coeff`` weighs the router's load-balancing loss of a mixture-of-experts
    model (0: off, the models' own routing is trained by the policy loss alone).
    """

    lr: float = _run_default("lr")
    min_lr: float = _run_default("min_lr")
    warmup_steps: int = _run_default("warmup_steps")
    lr_decay_style: str = _run_default("lr_decay_style")
    lr_decay_steps: int | None = _run_default("lr_decay_steps")
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    grad_clip: float = 1.0
    algorithm: str = _run_default("algorithm")
    algorithm_options: dict[str, Any] = field(default_factory=dict)
    clip_eps: float | None = None
    tis_cap: float | None = _run_default("tis_cap")
    max_new_tokens: int | None = _run_default("max_new_tokens")
    kl_coef: float = _run_default("kl_coef")
    entropy_coef: float = _run_default("entropy_coef")
    micro_batch_size: int = _run_default("micro_batch_size")
    micro_batch_tokens: int | None = _run_default("micro_batch_tokens")
    share_prompts: bool = _run_default("share_prompts")
    minibatches: int = 1  # RunConfig's default depends on --groups-per-step
    temperature: float = _run_default("temperature")
    filter_zero_variance: bool = not _run_default("keep_zero_variance_groups")
    seed: int = _run_default("seed")
    global_batch_size: int | None = None  # RunConfig's: --groups-per-step × --group-size
    dtype: str = _run_default("dtype")
    moe_aux_loss_coeff: float = _run_default("moe_aux_loss_coeff")

    @classmethod
    def from_run(cls, config: RunConfig, algorithm_options: Mapping[str, Any]) -> TrainConfig:
        """The trainer's settings of a run: each shared field is the run's option of
        :data:`RUN_NAMES` (the training temperature is the sampling temperature), the rest
        follow from the run's batch; ``algorithm_options`` are the algorithm plugin's values."""
        shared = {name: getattr(config, RUN_NAMES.get(name, name)) for name in _shared()}
        return cls(**shared, algorithm_options=dict(algorithm_options),
                   minibatches=config.minibatches or 1,
                   filter_zero_variance=not config.keep_zero_variance_groups,
                   global_batch_size=config.groups_per_step * config.group_size)

    def validate(self) -> None:
        """ConfigError naming the first field whose value cannot work: a shared field by its
        run option's check, the trainer's own fields here."""
        for name, spec in _shared().items():
            value = getattr(self, name)
            if value is None and (spec.optional or name in _UNBOUNDED):
                continue
            spec.coerce(value, f"TrainConfig.{name}")
        positive = {"adam_eps": self.adam_eps, "minibatches": self.minibatches}
        non_negative = {"weight_decay": self.weight_decay, "grad_clip": self.grad_clip}
        for name, value in {**positive, **non_negative}.items():
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"TrainConfig.{name} is {value!r}; expected a finite number")
            if value < 0 or (name in positive and value == 0):
                raise ConfigError(f"TrainConfig.{name} is {value!r}; it must be "
                                  f"{'positive' if name in positive else 'not negative'}")
        if self.clip_eps is not None and self.clip_eps < 0:
            raise ConfigError(f"TrainConfig.clip_eps is {self.clip_eps!r}; it must not be "
                              "negative")
        if not isinstance(self.algorithm_options, dict) or not all(
                isinstance(key, str) for key in self.algorithm_options):
            raise ConfigError("TrainConfig.algorithm_options must be a dict of option name to "
                              f"value, got {self.algorithm_options!r}")
        if self.lr_decay_style != "constant" and not self.lr_decay_steps:
            raise ConfigError(f"TrainConfig.lr_decay_style {self.lr_decay_style!r} needs "
                              "lr_decay_steps (the number of steps to decay over)")
        if self.lr_decay_steps is not None and self.lr_decay_steps <= self.warmup_steps:
            raise ConfigError(f"TrainConfig.lr_decay_steps={self.lr_decay_steps} must exceed "
                              f"warmup_steps={self.warmup_steps}")
        if self.global_batch_size is not None and self.global_batch_size < 1:
            raise ConfigError(f"TrainConfig.global_batch_size is {self.global_batch_size!r}; "
                              "it must be positive")


#: shared fields a standalone TrainConfig may leave unset though the run always sets them
_UNBOUNDED = frozenset({"micro_batch_tokens", "max_new_tokens"})
