"""Facts about the model and its samples that the run (``rollyard.run``) and the trainer
(``rollyard.training``) must agree on: how many tokens the model takes, what becomes of a
sample longer than that, and when a group of samples carries no learning signal.

A low module: it imports only the core's types, so both sides (and plugins) can use it
without one reaching into the other."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rollyard.types import Sample

#: The context assumed for a model whose config.json has no ``max_position_embeddings``.
DEFAULT_MAX_TOKENS = 4096

#: Rewards whose population standard deviation is below this are all equal.
ZERO_VARIANCE_STD = 1e-8


def context_length(hf_config: Mapping[str, Any]) -> int:
    """The most tokens (prompt and response together) a model takes: the
    ``max_position_embeddings`` of its Hugging Face config, else :data:`DEFAULT_MAX_TOKENS`."""
    return int(hf_config.get("max_position_embeddings") or DEFAULT_MAX_TOKENS)


def model_max_tokens(model_dir: str | Path) -> int:
    """:func:`context_length` of the model in a Hugging Face folder (its config.json)."""
    return context_length(json.loads((Path(model_dir) / "config.json").read_text()))


def fail_if_too_long(sample: Sample, max_tokens: int | None) -> bool:
    """Fail ``sample`` in place when its prompt and response are longer than ``max_tokens``:
    the model cannot train on it, but that is one sample's problem, not the run's. Returns
    whether it failed it. The tokens stay, to be looked at. ``max_tokens`` None: no limit."""
    if max_tokens is None or len(sample.tokens) <= max_tokens or not sample.usable:
        return False
    sample.fail(
        f"sample of task {sample.task_id!r} is too long for the model: {len(sample.tokens)} "
        f"tokens (prompt {sample.prompt_len} + response {sample.response_len}) exceed its "
        f"max_position_embeddings={max_tokens}; lower --max-new-tokens or shorten the prompts")
    return True


def population_std(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def rewards_differ(rewards: Sequence[float]) -> bool:
    """The zero-variance rule: a group teaches something only when it has at least two
    rewards and they are not all equal (population std at least :data:`ZERO_VARIANCE_STD`)."""
    return len(rewards) >= 2 and population_std(rewards) >= ZERO_VARIANCE_STD
