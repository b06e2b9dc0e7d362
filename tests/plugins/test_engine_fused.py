"""The embedded engine's fused decoder layers compute what transformers' layers compute."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_fused_layers_equal_transformers_layers(tmp_path, other_model_dir, arch) -> None:
    import torch
    from rollyard.models.tiny import build_tiny_model
    from rollyard_plugins.embedded_engine.model_runner import ModelRunner

    model_dir = build_tiny_model(tmp_path / arch, arch=arch, seed=3)
    fused, plain = ModelRunner(model_dir, 4), ModelRunner(model_dir, 4)
    plain.fused = None
    assert fused.fused is not None
    prompts, slots = [[1, 5, 9, 22, 7], [3, 4], [8] * 7], [0, 1, 2]
    # the same computation, its products through oneDNN (and decode attention as batched
    # products): equal to rounding
    assert torch.allclose(fused.forward(prompts, [0, 0, 0], slots),
                          plain.forward(prompts, [0, 0, 0], slots), rtol=0, atol=1e-5)
    step = ([[11], [12], [13]], [5, 2, 7], slots)
    assert torch.allclose(fused.forward(*step), plain.forward(*step), rtol=0, atol=1e-5)
    if arch == "qwen3":  # new weights reach the fused weights too
        for runner in (fused, plain):
            runner.load_weights(other_model_dir)
        assert torch.allclose(fused.forward(prompts, [0, 0, 0], slots),
                              plain.forward(prompts, [0, 0, 0], slots), rtol=0, atol=1e-5)


def test_models_the_fused_layers_do_not_cover_keep_transformers_layers() -> None:
    from types import SimpleNamespace

    from rollyard_plugins.embedded_engine.fused import unsupported

    assert unsupported(SimpleNamespace(model_type="qwen3", attention_bias=True)) == "biases"
    assert unsupported(SimpleNamespace(model_type="gpt2")) == "model type 'gpt2'"
    assert unsupported(SimpleNamespace(model_type="llama", hidden_act="gelu")) == (
        "activation 'gelu'")
