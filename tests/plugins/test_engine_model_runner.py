"""The embedded engine's batched forward with its slot KV cache equals transformers' own
full forward pass, for both architectures, sequences of different lengths and slots."""

from __future__ import annotations

import pytest
import torch
from rollyard.models.tiny import build_tiny_model
from rollyard_plugins.embedded_engine.model_runner import ModelRunner


@pytest.mark.parametrize("arch, size, slots", [
    ("qwen3", "tiny", [3, 0, 1]), ("qwen3", "tiny", [1, 2, 3]), ("llama", "tiny", [2, 1, 0]),
    ("llama", "small", [0, 1, 2])])
def test_prefill_and_decode_match_a_full_forward(tmp_path, arch, size, slots) -> None:
    folder = build_tiny_model(tmp_path, arch=arch, size=size, seed=2)
    runner = ModelRunner(folder, max_batch_size=4)
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 512, (n,), generator=generator).tolist() for n in (7, 2, 12)]
    futures = [torch.randint(0, 512, (5,), generator=generator).tolist() for _ in prompts]
    reference = [runner.model(torch.tensor([p + f])).logits[0].detach()
                 for p, f in zip(prompts, futures)]

    logits = runner.forward(prompts, [0, 0, 0], slots)
    for row, (prompt, ref) in enumerate(zip(prompts, reference)):
        assert torch.allclose(logits[row], ref[len(prompt) - 1], atol=1e-4)
    for step in range(5):
        logits = runner.forward([[f[step]] for f in futures],
                                [len(p) + step for p in prompts], slots)
        for row, (prompt, ref) in enumerate(zip(prompts, reference)):
            assert torch.allclose(logits[row], ref[len(prompt) + step], atol=1e-4)


def test_cache_grows_past_its_first_allocation(tmp_path) -> None:
    folder = build_tiny_model(tmp_path, seed=3)
    runner = ModelRunner(folder, max_batch_size=2)
    first = runner.cache.capacity
    prompt = list(range(3, 3 + first + 20))
    logits = runner.forward([prompt], [0], [1])
    reference = runner.model(torch.tensor([prompt])).logits[0, -1].detach()
    assert runner.cache.capacity > first
    assert torch.allclose(logits[0], reference, atol=1e-4)
    with pytest.raises(ValueError, match="context length"):
        runner.cache.reserve(runner.context_len + 1)
