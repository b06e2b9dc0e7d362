"""Which defaults a run's model gets: the from-scratch defaults for a model that
``rollyard init-model`` built, the pretrained defaults for every other model folder.

The rule is a marker file: :func:`rollyard.models.tiny.build_tiny_model` writes
:data:`INIT_MARKER` into the folder it builds, and a run's exports copy it along with the other
non-weight files, so a model trained from scratch keeps its defaults when a later run continues
from the export. A folder without the marker (a checkpoint from the hub, a converted GGUF, a
random model built by hand with transformers) is treated as pretrained. The core's option
defaults (``--lr 3e-3`` and the rest) were tuned on a randomly initialised 0.2 M-parameter model
and wreck a pretrained checkpoint within a few steps; :data:`PRETRAINED_DEFAULTS` replace them
for every option the user did not set. ``--model-defaults scratch|pretrained`` overrides the
rule.

This module is imported by the light core (config building): it reads one file name, nothing
else.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from typing import Any, Literal

#: written by ``rollyard init-model`` into the folder it builds
INIT_MARKER = "rollyard-init-model.json"

ModelDefaults = Literal["scratch", "pretrained"]

#: Options whose core default is replaced for a pretrained model, with their pretrained value.
#: lr: the measured sweep of docs/training.md ("Pretrained defaults") on SmolLM2-135M-Instruct;
#: groups_per_step: 64 groups of 8 is ~512 generations a step, minutes per step for a
#: 100 M-parameter model on CPU; micro_batch_tokens: a 50k-token vocabulary makes the logits of
#: 8192 tokens 1.6 GB in fp32 (and as much again for their gradient).
PRETRAINED_DEFAULTS: Mapping[str, Any] = {"lr": 1e-6, "groups_per_step": 8,
                                          "micro_batch_tokens": 2048}


def write_init_marker(model_dir: str | pathlib.Path, **fields: Any) -> None:
    """Mark ``model_dir`` as built from scratch by ``rollyard init-model`` (``fields``: how)."""
    data = {"built_by": "rollyard init-model", **fields}
    (pathlib.Path(model_dir) / INIT_MARKER).write_text(json.dumps(data, indent=2) + "\n")


def model_defaults_of(model: str | None) -> ModelDefaults:
    """``scratch`` for no model (the default run builds a tiny one) or a folder holding
    :data:`INIT_MARKER`; ``pretrained`` for anything else."""
    if model is None or (pathlib.Path(model) / INIT_MARKER).is_file():
        return "scratch"
    return "pretrained"


def defaults_line(values: Mapping[str, Any]) -> str:
    """The one line a run prints at start when its model gets the pretrained defaults: each
    option of :data:`PRETRAINED_DEFAULTS` with the value the run uses (``values``: the run's
    options by name), marked ``(set)`` where it is not the pretrained default."""
    parts = [f"--{name.replace('_', '-')} {values[name]:g}"
             + ("" if values[name] == default else " (set)")
             for name, default in PRETRAINED_DEFAULTS.items()]
    return ("pretrained model: using the pretrained defaults " + ", ".join(parts)
            + " (flags win; --model-defaults scratch gives the from-scratch ones)")
