"""Every architecture the trainer takes, dense and mixture of experts, checked against
transformers itself.

(a) Megatron's logits equal transformers' at tensor parallelism 1 and 2, and for a mixture of
experts at expert parallelism 2; (b) HF -> Megatron -> HF is bit-exact, in memory and through
the trainer's export; (c) the embedded engine's
logprobs of the continuations it samples equal transformers' teacher forcing; (d) two
training steps on engine samples, the engine reloading the trained weights between them,
recompute the engine's logprobs, and the exported folder loads and generates in transformers.
"""

from __future__ import annotations

import math
import pathlib

import pytest
import torch
from architectures import ARCHITECTURES, model_type
from engine_sampler import EngineSampler, prompts
from rollyard import Sample
from rollyard.training import TrainConfig, TrainGroup
from rollyard.training.convert import (
    MOE_MODEL_TYPES,
    ModelShape,
    global_expert_name,
    hf_to_megatron,
    megatron_to_hf,
)
from rollyard.training.hf_folder import load_hf_weights, read_hf_config

TOLERANCE = 1e-4
ARCHS = list(ARCHITECTURES)
MOE_ARCHS = [arch for arch in ARCHS if model_type(arch) in MOE_MODEL_TYPES]
DENSE_ARCHS = [arch for arch in ARCHS if arch not in MOE_ARCHS]


def transformers_model(model_dir: pathlib.Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def teacher_forced(model_dir: pathlib.Path, samples: list[Sample]) -> list[list[float]]:
    """transformers' logprob of each response token given everything before it."""
    model = transformers_model(model_dir)
    out = []
    with torch.no_grad():
        for s in samples:
            logprobs = torch.log_softmax(model(torch.tensor([s.tokens])).logits[0], dim=-1)
            out.append([logprobs[t - 1, s.tokens[t]].item()
                        for t in range(s.prompt_len, len(s.tokens))])
    return out


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("arch", ARCHS)
def test_megatron_logits_equal_transformers(arch: str, tp: int, model_dirs, probe_tokens,
                                            megatron_outputs) -> None:
    with torch.no_grad():
        expected = transformers_model(model_dirs[arch])(probe_tokens).logits
    ours = torch.load(megatron_outputs / f"{arch}-tp{tp}.pt")
    assert ours.shape == expected.shape
    assert (ours - expected).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("ep", [2])
@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_expert_parallel_logits_equal_transformers(arch: str, ep: int, model_dirs,
                                                   probe_tokens, megatron_outputs) -> None:
    """Two data-parallel ranks with half the experts each, fed the same rows: each token's
    expert outputs come from both ranks (the all-to-all dispatcher)."""
    with torch.no_grad():
        expected = transformers_model(model_dirs[arch])(probe_tokens).logits
    ours = torch.load(megatron_outputs / f"{arch}-ep{ep}.pt")
    assert ours.shape == expected.shape
    assert (ours - expected).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_expert_parallel_round_trip_is_bit_exact(arch: str, model_dirs) -> None:
    hf = load_hf_weights(model_dirs[arch])
    shape = ModelShape.from_hf_config(read_hf_config(model_dirs[arch]))
    merged = {global_expert_name(name, rank, 2, shape): tensor for rank in range(2)
              for name, tensor in hf_to_megatron(hf, shape, 0, 1, rank, 2).items()}
    assert sum(".local_experts." in name for name in merged) == 2 * shape.num_experts * 2
    back = megatron_to_hf([merged], shape)
    assert sorted(back) == sorted(hf) and all(torch.equal(back[k], hf[k]) for k in hf)


@pytest.mark.parametrize("arch, fields, pre_softmax", [
    ("mixtral", {}, False),  # Mixtral renormalises the top k: their logits' softmax
    ("qwen3_moe", {"norm_topk_prob": True}, False),
    ("qwen3_moe", {"norm_topk_prob": False}, True),  # softmax over all experts, top k kept
])
def test_moe_routing_follows_norm_topk_prob(model_dirs, arch, fields, pre_softmax) -> None:
    from rollyard.training.model import moe_settings

    config = {**read_hf_config(model_dirs[arch]), **fields}
    assert moe_settings(config)["moe_router_pre_softmax"] is pre_softmax
    assert moe_settings(config)["moe_router_load_balancing_type"] == "none"  # off by default
    with_aux = moe_settings(config, aux_loss_coeff=0.01)
    assert (with_aux["moe_router_load_balancing_type"], with_aux["moe_aux_loss_coeff"]) == \
        ("aux_loss", 0.01)
    assert moe_settings(read_hf_config(model_dirs["qwen3"])) == {}


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("arch", ARCHS)
def test_conversion_round_trip_is_bit_exact(arch: str, tp: int, model_dirs) -> None:
    hf = load_hf_weights(model_dirs[arch])
    shape = ModelShape.from_hf_config(read_hf_config(model_dirs[arch]))
    back = megatron_to_hf([hf_to_megatron(hf, shape, rank, tp) for rank in range(tp)], shape)
    assert sorted(back) == sorted(hf)
    assert all(back[k].dtype == hf[k].dtype and torch.equal(back[k], hf[k]) for k in hf)


@pytest.mark.parametrize("arch", ARCHS)
def test_export_from_two_ranks_is_bit_exact(arch: str, model_dirs, megatron_outputs) -> None:
    """From two tensor-parallel ranks, and a mixture of experts also from two
    expert-parallel ranks."""
    original = load_hf_weights(model_dirs[arch])
    for export in [f"{arch}-export"] + ([f"{arch}-export-ep2"] if arch in MOE_ARCHS else []):
        exported = load_hf_weights(megatron_outputs / export)
        assert sorted(exported) == sorted(original)  # a tied model exports no lm_head.weight
        assert all(torch.equal(exported[k], original[k]) for k in original), export
    assert ("lm_head.weight" not in exported) == ARCHITECTURES[arch][1].get(
        "tie_word_embeddings", False)


@pytest.mark.parametrize("arch", ARCHS)
def test_engine_logprobs_equal_teacher_forcing(arch: str, model_dirs) -> None:
    engine = EngineSampler(model_dirs[arch])
    try:
        samples = engine.sample(prompts(seed=1), per_prompt=3, seed=1)
    finally:
        engine.close()
    expected = teacher_forced(model_dirs[arch], samples)
    assert len({tuple(s.response_ids) for s in samples}) > 1  # really sampled
    for sample, reference in zip(samples, expected, strict=True):
        assert sample.logprobs == pytest.approx(reference, abs=TOLERANCE)


@pytest.mark.parametrize("arch", DENSE_ARCHS)
def test_engine_fused_layers_equal_transformers_layers(arch: str, model_dirs) -> None:
    """The engine's fast path takes every dense architecture here, and computes what
    transformers' layers compute (prefill exactly, decode to rounding)."""
    from rollyard_plugins.embedded_engine.model_runner import ModelRunner

    fused, plain = ModelRunner(model_dirs[arch], 4), ModelRunner(model_dirs[arch], 4)
    plain.fused = None
    assert fused.fused is not None
    prompt_ids, slots = [*prompts(seed=2), [7] * 70], [0, 1, 2]
    assert torch.allclose(fused.forward(prompt_ids, [0, 0, 0], slots),
                          plain.forward(prompt_ids, [0, 0, 0], slots), rtol=0, atol=1e-5)
    step = ([[11], [12], [13]], [len(p) for p in prompt_ids], slots)
    assert torch.allclose(fused.forward(*step), plain.forward(*step), rtol=0, atol=1e-5)


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_engine_runs_a_mixture_of_experts_on_transformers_layers(arch: str, model_dirs) -> None:
    """The fast path leaves mixtures of experts to transformers' own layers, and the engine
    serves their experts under the checkpoint's per-expert names (views of the stacked
    parameters transformers runs)."""
    from rollyard_plugins.embedded_engine.model_runner import ModelRunner

    runner = ModelRunner(model_dirs[arch], 2)
    assert runner.fused is None
    checkpoint = load_hf_weights(model_dirs[arch])
    assert sorted(runner.load_tensors(checkpoint.items(), "checkpoint", complete=True)) == \
        sorted(checkpoint)
    expert = next(name for name in checkpoint if ".experts.1." in name)
    runner.load_tensors([(expert, torch.zeros_like(checkpoint[expert]))], "one expert")
    stacked = dict(runner.model.named_parameters())[
        expert.split(".experts.")[0].replace("block_sparse_moe", "mlp") + ".experts." +
        ("down_proj" if expert.endswith(("down_proj.weight", "w2.weight")) else "gate_up_proj")]
    assert stacked[1].abs().sum() < stacked[0].abs().sum()  # written through the view


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_two_training_steps_on_engine_samples(arch: str, model_dirs, ray_session,
                                              tmp_path: pathlib.Path) -> None:
    engine = EngineSampler(model_dirs[arch])
    config = TrainConfig(algorithm="grpo", lr=1e-2, micro_batch_size=8)
    try:
        with TrainGroup(str(model_dirs[arch]), config, tp=1, dp=1) as group:
            for step in range(2):
                metrics = group.train(engine.sample(prompts(seed=10 + step), 4, seed=step))
                assert metrics["num_samples_trained"] == 8 and metrics["update_skipped"] == 0
                assert metrics["logprob_mismatch"] <= TOLERANCE, f"step {step + 1}"
                assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
                exported = group.export_hf(str(tmp_path / f"step-{step + 1}"))
                engine.load(exported)
        greedy = engine.sample([prompts(seed=20)[0]], 1, seed=0, temperature=0.0)[0]
    finally:
        engine.close()
    original, trained = load_hf_weights(model_dirs[arch]), load_hf_weights(exported)
    assert any(not torch.equal(original[k], trained[k]) for k in original)
    model = transformers_model(pathlib.Path(exported))
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    prompt = torch.tensor([greedy.tokens[:greedy.prompt_len]])
    generated = model.generate(prompt, max_new_tokens=len(greedy.response_ids), do_sample=False,
                               min_new_tokens=len(greedy.response_ids))
    assert generated[0, greedy.prompt_len:].tolist() == greedy.response_ids


@pytest.mark.slow
def test_expert_parallel_training_step_equals_one_rank(model_dirs, ray_session,
                                                       tmp_path: pathlib.Path) -> None:
    """One step at --train-dp 2 --train-ep 2 (each rank half the samples and half the
    experts) trains what one rank does: the same gradient norm (measured: equal to 1e-7
    relative; the experts' gradients are reduced as the dense ones are) and the same weights
    after Adam's step (measured: 1.4e-5 apart at lr 1e-2, where Adam's first step moves a
    weight by about the learning rate)."""
    arch = "mixtral"
    engine = EngineSampler(model_dirs[arch])
    try:
        samples = engine.sample(prompts(seed=30), 4, seed=3)
    finally:
        engine.close()
    results = {}
    for dp, ep in ((1, 1), (2, 2)):
        with TrainGroup(str(model_dirs[arch]),
                        TrainConfig(algorithm="grpo", lr=1e-2, micro_batch_size=8),
                        tp=1, dp=dp, ep=ep) as group:
            metrics = group.train(samples)
            results[ep] = (metrics, load_hf_weights(group.export_hf(str(tmp_path / f"ep{ep}"))))
    (one, one_weights), (two, two_weights) = results[1], results[2]
    assert two["num_samples_trained"] == 8 and two["logprob_mismatch"] <= TOLERANCE
    assert two["loss"] == pytest.approx(one["loss"], abs=1e-6)
    assert two["grad_norm"] == pytest.approx(one["grad_norm"], rel=1e-4)
    assert sorted(two_weights) == sorted(one_weights)
    assert all(torch.allclose(two_weights[k], one_weights[k], rtol=0, atol=1e-4)
               for k in one_weights)
