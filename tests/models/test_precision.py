"""bf16 training (``TrainConfig.dtype``, ``--train-dtype``) and a bf16 engine
(``--embedded-dtype``): really bf16 where they should be, fp32 where megatron-core's
mixed-precision optimizer keeps the master weights and gradients, and the trainer's
recomputed logprobs close to the engine's."""

from __future__ import annotations

import json
import math
import pathlib

import pytest
import torch
from engine_sampler import EngineSampler, prompts
from rollyard.training import TrainConfig, TrainGroup
from rollyard.training.hf_folder import load_hf_weights

#: measured: 1.7e-3 at steps 1 and 2 (qwen2 row, trainer and engine in bf16, CPU);
#: in fp32 on both sides the conformance suite holds it to 1e-4
BF16_MISMATCH_BOUND = 2e-2


@pytest.mark.slow
def test_bf16_training_with_a_bf16_engine(model_dirs, ray_session,
                                          tmp_path: pathlib.Path) -> None:
    import ray
    from transformers import AutoModelForCausalLM

    # a local function: Ray pickles it by value, so the rank need not import this module
    def _precision(worker) -> dict[str, set[str]]:
        """The dtypes inside a training rank: parameters, their gradient buffers, the
        optimizer's master copies, and the optimizer classes."""
        optimizers = worker.optimizer.chained_optimizers
        return {"params": {str(p.dtype) for p in worker.model.parameters()},
                "main_grads": {str(p.main_grad.dtype) for p in worker.model.parameters()},
                "masters": {str(p.dtype) for o in optimizers
                            for group in getattr(o, "fp32_from_float16_groups", []) for p in group},
                "optimizers": {type(o).__name__ for o in optimizers}}

    engine = EngineSampler(model_dirs["qwen2"], dtype="bf16")
    config = TrainConfig(algorithm="grpo", lr=1e-2, micro_batch_size=8, dtype="bf16")
    try:
        assert engine.runner.model.model.embed_tokens.weight.dtype == torch.bfloat16
        with TrainGroup(str(model_dirs["qwen2"]), config, tp=1, dp=1) as group:
            inside = ray.get(group._actors[0].__ray_call__.remote(_precision))
            for step in range(2):
                metrics = group.train(engine.sample(prompts(seed=10 + step), 4, seed=step))
                assert metrics["num_samples_trained"] == 8 and metrics["update_skipped"] == 0
                assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
                assert 0 < metrics["logprob_mismatch"] <= BF16_MISMATCH_BOUND, f"step {step + 1}"
                exported = group.export_hf(str(tmp_path / f"step-{step + 1}"))
                engine.load(exported)
    finally:
        engine.close()
    assert inside == {"params": {"torch.bfloat16"}, "main_grads": {"torch.float32"},
                      "masters": {"torch.float32"},
                      "optimizers": {"Float16OptimizerWithFloat16Params"}}
    assert json.loads((pathlib.Path(exported) / "config.json").read_text())["dtype"] == "bfloat16"
    tensors = load_hf_weights(exported)
    assert {t.dtype for t in tensors.values()} == {torch.bfloat16}
    original = load_hf_weights(model_dirs["qwen2"])
    assert any(not torch.equal(original[k].bfloat16(), tensors[k]) for k in original)
    model = AutoModelForCausalLM.from_pretrained(exported)
    assert model.dtype == torch.bfloat16  # transformers reads the recorded dtype


def test_fp32_export_keeps_config_json_byte_for_byte(tmp_path: pathlib.Path) -> None:
    from rollyard.training.hf_folder import write_hf_folder

    source = tmp_path / "source"
    source.mkdir()
    text = '{"model_type": "qwen2", "dtype": "float32"}'
    (source / "config.json").write_text(text)
    write_hf_folder(tmp_path / "fp32", {"w": torch.zeros(2)}, source)
    assert (tmp_path / "fp32" / "config.json").read_text() == text
    write_hf_folder(tmp_path / "bf16", {"w": torch.zeros(2, dtype=torch.bfloat16)}, source)
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["dtype"] == "bfloat16"
