"""The served model's tensors under the names a checkpoint gives them.

transformers 5 keeps a mixture of experts' experts stacked while it runs
(``mlp.experts.gate_up_proj`` [experts, 2 × ffn, hidden], gate rows first, and
``mlp.experts.down_proj`` [experts, hidden, ffn]) and converts a checkpoint's per-expert
tensors when it loads one. A checkpoint, the trainer's export and an in-memory weight update
name every expert's projection on its own, Qwen3-MoE as ``mlp.experts.<j>.gate_proj.weight``
(``up_proj``, ``down_proj``), Mixtral as ``block_sparse_moe.experts.<j>.w1.weight`` (``w3``
up, ``w2`` down, router ``block_sparse_moe.gate``). Here each of those names is a view of its
rows of the stacked parameter, so a load that copies into the views writes the parameters.
"""

from __future__ import annotations

from typing import Any

import torch

#: model type -> (the MoE block in checkpoint names, the expert's gate, up and down names)
CHECKPOINT_EXPERTS = {"qwen3_moe": ("mlp", ("gate_proj", "up_proj", "down_proj")),
                      "mixtral": ("block_sparse_moe", ("w1", "w3", "w2"))}
_EXPERTS = ".mlp.experts."


def checkpoint_tensors(model: Any) -> dict[str, torch.Tensor]:
    """Every tensor of ``model``'s state dict by its checkpoint name (views, never copies)."""
    state: dict[str, torch.Tensor] = model.state_dict()
    naming = CHECKPOINT_EXPERTS.get(model.config.model_type)
    if naming is None:
        return state
    block, (gate, up, down) = naming
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        layer, _, rest = name.partition(_EXPERTS)
        prefix = f"{layer}.{block}.experts."
        if rest == "gate_up_proj":
            ffn = tensor.shape[1] // 2
            for j, stacked in enumerate(tensor):
                out[f"{prefix}{j}.{gate}.weight"] = stacked[:ffn]
                out[f"{prefix}{j}.{up}.weight"] = stacked[ffn:]
        elif rest == "down_proj":
            for j, stacked in enumerate(tensor):
                out[f"{prefix}{j}.{down}.weight"] = stacked
        else:
            out[name.replace(".mlp.gate.", f".{block}.gate.")] = tensor
    return out
