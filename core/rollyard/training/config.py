"""The trainer's settings: optimiser, schedule, loss and batching."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from rollyard.errors import ConfigError

LR_DECAY_STYLES = ("constant", "linear", "cosine")
#: the trainer's parameter and activation precisions (bf16: with fp32 master weights)
TRAIN_DTYPES = ("fp32", "bf16")


@dataclass
class TrainConfig:
    """Settings of the Megatron policy update; every field has a usable default.

    ``temperature`` must equal the sampling temperature of the rollouts: recomputed
    logprobs are ``log_softmax(logits / temperature)`` of the sampled token, as in the engine.
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

    lr: float = 1e-5
    min_lr: float = 0.0
    warmup_steps: int = 0
    lr_decay_style: str = "constant"
    lr_decay_steps: int | None = None
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    grad_clip: float = 1.0
    algorithm: str = "grpo"
    algorithm_options: dict[str, Any] = field(default_factory=dict)
    clip_eps: float | None = None
    tis_cap: float | None = None
    max_new_tokens: int | None = None
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    micro_batch_size: int = 8
    micro_batch_tokens: int | None = None
    share_prompts: bool = True
    minibatches: int = 1
    temperature: float = 1.0
    filter_zero_variance: bool = True
    seed: int = 0
    global_batch_size: int | None = None
    dtype: str = "fp32"
    moe_aux_loss_coeff: float = 0.0

    def validate(self) -> None:
        """ConfigError naming the first field whose value cannot work."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"TrainConfig.{f.name} is {value!r}; expected a finite number")
        positive = {"lr": self.lr, "temperature": self.temperature,
                    "micro_batch_size": self.micro_batch_size, "adam_eps": self.adam_eps,
                    "minibatches": self.minibatches}
        for name, value in positive.items():
            if value <= 0:
                raise ConfigError(f"TrainConfig.{name} is {value!r}; it must be positive")
        non_negative = {"min_lr": self.min_lr, "warmup_steps": self.warmup_steps,
                        "weight_decay": self.weight_decay, "grad_clip": self.grad_clip,
                        "kl_coef": self.kl_coef,
                        "entropy_coef": self.entropy_coef,
                        "moe_aux_loss_coeff": self.moe_aux_loss_coeff}
        for name, value in non_negative.items():
            if value < 0:
                raise ConfigError(f"TrainConfig.{name} is {value!r}; it must not be negative")
        if self.clip_eps is not None and self.clip_eps < 0:
            raise ConfigError(f"TrainConfig.clip_eps is {self.clip_eps!r}; it must not be "
                              "negative")
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ConfigError(f"TrainConfig.tis_cap is {self.tis_cap!r}; the importance-weight "
                              "cap must be positive (leave it unset to turn TIS off)")
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 1:
            raise ConfigError(f"TrainConfig.micro_batch_tokens is {self.micro_batch_tokens!r}; "
                              "it must be positive (leave it unset for no token bound)")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ConfigError(f"TrainConfig.max_new_tokens is {self.max_new_tokens!r}; it must "
                              "be positive")
        if not isinstance(self.algorithm, str) or not self.algorithm:
            raise ConfigError(f"TrainConfig.algorithm is {self.algorithm!r}; expected the name "
                              "of an algorithm plugin")
        if not isinstance(self.algorithm_options, dict) or not all(
                isinstance(key, str) for key in self.algorithm_options):
            raise ConfigError("TrainConfig.algorithm_options must be a dict of option name to "
                              f"value, got {self.algorithm_options!r}")
        if self.dtype not in TRAIN_DTYPES:
            raise ConfigError(f"TrainConfig.dtype is {self.dtype!r}; expected one of "
                              f"{', '.join(TRAIN_DTYPES)}")
        if self.lr_decay_style not in LR_DECAY_STYLES:
            raise ConfigError(f"TrainConfig.lr_decay_style is {self.lr_decay_style!r}; "
                              f"expected one of {', '.join(LR_DECAY_STYLES)}")
        if self.lr_decay_style != "constant" and not self.lr_decay_steps:
            raise ConfigError(f"TrainConfig.lr_decay_style {self.lr_decay_style!r} needs "
                              "lr_decay_steps (the number of steps to decay over)")
        if self.lr_decay_steps is not None and self.lr_decay_steps <= self.warmup_steps:
            raise ConfigError(f"TrainConfig.lr_decay_steps={self.lr_decay_steps} must exceed "
                              f"warmup_steps={self.warmup_steps}")
        if self.global_batch_size is not None and self.global_batch_size < 1:
            raise ConfigError(f"TrainConfig.global_batch_size is {self.global_batch_size!r}; "
                              "it must be positive")
