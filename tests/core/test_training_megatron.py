"""HF <-> Megatron conversion and the train group on Ray, against transformers itself.

The models are built in the test from small Qwen3 (q/k norm, tied embeddings) and Llama
(untied) configs: hidden 64, 2 layers, 4 heads, 2 key/value heads, vocabulary 512.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from rollyard import Sample
from rollyard.training import TrainConfig, TrainGroup
from rollyard.training.batching import TrainItem, collate
from rollyard.training.convert import ModelShape, hf_to_megatron, megatron_to_hf
from rollyard.training.group import minibatch_shares
from rollyard.training.hf_folder import load_hf_weights, read_hf_config

SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "vocab_size": 512, "max_position_embeddings": 128}
TOKENIZER_FILE = '{"stand-in": "copied byte for byte"}\n'


def write_model(out: Path, arch: str, tied: bool, seed: int = 0) -> Path:
    """A randomly initialised HF model folder with a stand-in tokenizer file."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

    config_class = {"qwen3": Qwen3Config, "llama": LlamaConfig}[arch]
    config = config_class(tie_word_embeddings=tied, **SHAPE)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out)
    (out / "tokenizer_config.json").write_text(TOKENIZER_FILE)
    return out


def hf_logprobs(model_dir: str | Path, samples: list[Sample],
                temperature: float = 1.0) -> list[list[float]]:
    """Response-token logprobs under transformers: log_softmax(logits / T) of each token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for s in samples:
            logits = model(torch.tensor([s.tokens])).logits[0] / temperature
            log_probs = torch.log_softmax(logits, dim=-1)
            out.append([log_probs[t - 1, s.tokens[t]].item()
                        for t in range(s.prompt_len, len(s.tokens))])
    return out


def hf_policy_grad_norm(model_dir: str | Path, samples: list[Sample],
                        temperature: float) -> float:
    """Gradient norm of the on-policy PPO loss, -sum(A * logprob) / tokens, in transformers."""
    from rollyard.algorithms import group_centred
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    advantages = group_centred([s.reward for s in samples], [s.group_id for s in samples])
    tokens = sum(s.response_len for s in samples)
    for s, advantage in zip(samples, advantages):
        logits = model(torch.tensor([s.tokens])).logits[0, s.prompt_len - 1: -1] / temperature
        chosen = torch.log_softmax(logits, -1).gather(-1, torch.tensor(s.response_ids)[:, None])
        (-(advantage * chosen.sum()) / tokens).backward()
    return torch.sqrt(sum((p.grad**2).sum() for p in model.parameters())).item()


def make_samples(groups: int, per_group: int, seed: int, rewards: list[float]) -> list[Sample]:
    """Samples of varied lengths (so micro-batches pad) with placeholder rollout logprobs.

    The samples of every even group share a long prompt, as a real group does, so the trainer
    computes it once for them (shared rows); those of the odd groups each have their own.
    """
    rng = random.Random(seed)
    samples = []
    for g in range(groups):
        shared = [rng.randrange(SHAPE["vocab_size"]) for _ in range(rng.randint(9, 12))]
        for j in range(per_group):
            prompt = shared if g % 2 == 0 else [rng.randrange(SHAPE["vocab_size"])
                                                for _ in range(rng.randint(2, 6))]
            prompt_len, response_len = len(prompt), rng.randint(3, 9)
            tokens = prompt + [rng.randrange(SHAPE["vocab_size"]) for _ in range(response_len)]
            samples.append(Sample(tokens=tokens, prompt_len=prompt_len,
                                  loss_mask=[1] * response_len, logprobs=[-1.0] * response_len,
                                  reward=rewards[j % len(rewards)], group_id=f"g{g}",
                                  task_id=f"t{g}"))
    return samples


def with_logprobs(samples: list[Sample], logprobs: list[list[float]]) -> list[Sample]:
    for sample, values in zip(samples, logprobs):
        sample.logprobs = [min(v, 0.0) for v in values]
    return samples


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name


@pytest.fixture(scope="module")
def qwen3_tied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("qwen3"), "qwen3", tied=True)


@pytest.fixture(scope="module")
def llama_untied(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("llama"), "llama", tied=False, seed=1)


@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("model", ["qwen3_tied", "llama_untied"])
def test_hf_megatron_hf_round_trip_is_bit_exact(model: str, tp: int,
                                                request: pytest.FixtureRequest) -> None:
    model_dir = request.getfixturevalue(model)
    hf = load_hf_weights(model_dir)
    shape = ModelShape.from_hf_config(read_hf_config(model_dir))
    shards = [hf_to_megatron(hf, shape, rank, tp) for rank in range(tp)]
    assert_same_tensors(megatron_to_hf(shards, shape), hf)
    qkv = shards[0]["decoder.layers.0.self_attention.linear_qkv.weight"]
    assert qkv.shape == ((4 + 2 * 2) * 16 // tp, 64)


def test_qkv_and_gate_up_follow_megatrons_per_group_per_rank_order(qwen3_tied: Path) -> None:
    hf = load_hf_weights(qwen3_tied)
    shape = ModelShape.from_hf_config(read_hf_config(qwen3_tied))
    rank1 = hf_to_megatron(hf, shape, tp_rank=1, tp_size=2)
    qkv = rank1["decoder.layers.1.self_attention.linear_qkv.weight"]
    q, k, v = (hf[f"model.layers.1.self_attn.{p}_proj.weight"] for p in "qkv")
    # rank 1 owns key/value group 1: query heads 2 and 3, then key head 1, then value head 1
    assert torch.equal(qkv[:32], q[32:64]) and torch.equal(qkv[32:48], k[16:32])
    assert torch.equal(qkv[48:64], v[16:32])
    fc1 = rank1["decoder.layers.1.mlp.linear_fc1.weight"]
    assert torch.equal(fc1[:64], hf["model.layers.1.mlp.gate_proj.weight"][64:])
    assert torch.equal(fc1[64:], hf["model.layers.1.mlp.up_proj.weight"][64:])
    assert "output_layer.weight" not in rank1  # tied: the embedding is the output layer


@pytest.mark.slow
class TestTensorParallel2:
    """Qwen3 with tied embeddings on two tensor-parallel ranks, at temperature 0.7."""

    @pytest.fixture(scope="class")
    def group(self, qwen3_tied: Path, ray_session: object) -> Iterator[TrainGroup]:
        group = TrainGroup(str(qwen3_tied), TrainConfig(algorithm="grpo", lr=1e-2, temperature=0.7,
                                                        micro_batch_size=3), tp=2, dp=1)
        try:
            yield group
        finally:
            group.shutdown()

    def test_logprobs_agree_with_transformers(self, group: TrainGroup,
                                              qwen3_tied: Path) -> None:
        samples = make_samples(2, 3, seed=0, rewards=[0.0])
        items = [TrainItem(s.tokens, s.prompt_len, s.loss_mask, s.logprobs, 0.0)
                 for s in samples]
        assert collate(items[:3], share_prompts=True).attention_mask is not None  # one row
        ours, theirs = group.logprobs(samples), hf_logprobs(qwen3_tied, samples, 0.7)
        for a, b in zip(ours, theirs, strict=True):
            assert a == pytest.approx(b, abs=1e-4)

    def test_export_before_training_is_bit_exact(self, group: TrainGroup, qwen3_tied: Path,
                                                 tmp_path: Path) -> None:
        out = Path(group.export_hf(str(tmp_path / "export")))
        assert_same_tensors(load_hf_weights(out), load_hf_weights(qwen3_tied))
        for name in ("config.json", "tokenizer_config.json"):
            assert (out / name).read_bytes() == (qwen3_tied / name).read_bytes()

    def test_all_groups_filtered_means_no_update(self, group: TrainGroup) -> None:
        samples = make_samples(2, 2, seed=1, rewards=[1.0])
        before = group.logprobs(samples)
        metrics = group.train(samples)
        assert metrics["num_samples_trained"] == 0 and metrics["num_groups_filtered"] == 2
        assert metrics["update_skipped"] == 1.0
        assert group.logprobs(samples) == before

    def test_train_step_learns_and_the_export_carries_it(self, group: TrainGroup,
                                                         qwen3_tied: Path,
                                                         tmp_path: Path) -> None:
        samples = make_samples(2, 4, seed=2, rewards=[1.0, 0.0])
        with_logprobs(samples, hf_logprobs(qwen3_tied, samples, 0.7))
        metrics = group.train(samples)
        assert math.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
        assert metrics["num_samples_trained"] == 8 and metrics["update_skipped"] == 0
        # rollout logprobs came from the same weights: the recomputation reproduces them
        assert metrics["logprob_mismatch"] < 1e-4 and metrics["clip_fraction"] == 0
        assert metrics["entropy"] > 0 and metrics["tokens"] > metrics["trained_tokens"] > 0
        expected_norm = hf_policy_grad_norm(qwen3_tied, samples, 0.7)
        assert metrics["grad_norm"] == pytest.approx(expected_norm, rel=1e-4)
        rewarded = [s for s in samples if s.reward == 1.0]
        after = group.logprobs(rewarded)
        gained = sum(sum(a) - sum(s.logprobs) for a, s in zip(after, rewarded))
        assert gained > 0  # the positive-advantage responses became more likely
        out = group.export_hf(str(tmp_path / "trained"))
        changed = load_hf_weights(out)
        original = load_hf_weights(qwen3_tied)
        assert any(not torch.equal(changed[k], original[k]) for k in original)
        for a, b in zip(hf_logprobs(out, rewarded, 0.7), after, strict=True):
            assert a == pytest.approx(b, abs=1e-4)


@pytest.mark.slow
def test_tensor_parallel_1_with_kl_and_entropy(llama_untied: Path, ray_session: object,
                                               tmp_path: Path) -> None:
    """Llama with an untied output layer, a frozen reference for KL and an entropy bonus."""
    config = TrainConfig(algorithm="grpo", lr=1e-2, kl_coef=0.1, entropy_coef=0.01,
                         micro_batch_size=4)
    with TrainGroup(str(llama_untied), config, tp=1, dp=1) as group:
        samples = make_samples(2, 4, seed=3, rewards=[0.0, 1.0, 0.5])
        reference = hf_logprobs(llama_untied, samples)
        for a, b in zip(group.logprobs(samples), reference, strict=True):
            assert a == pytest.approx(b, abs=1e-4)
        out = group.export_hf(str(tmp_path / "export"))
        assert_same_tensors(load_hf_weights(out), load_hf_weights(llama_untied))
        with_logprobs(samples, reference)
        first = group.train(samples)
        assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference before the step
        second = group.train(samples)
        assert second["kl"] > 0 and math.isfinite(second["loss"])
        assert second["entropy"] > 0 and second["lr"] == pytest.approx(1e-2)


@pytest.mark.slow
def test_data_parallel_2_matches_the_single_process_gradient(qwen3_tied: Path,
                                                             ray_session: object) -> None:
    """Two data-parallel replicas split the batch; the loss and gradient are those of one."""
    with TrainGroup(str(qwen3_tied), TrainConfig(algorithm="grpo", lr=1e-3, micro_batch_size=2),
                    tp=1, dp=2) as group:
        samples = make_samples(3, 2, seed=4, rewards=[0.0, 1.0])
        with_logprobs(samples, hf_logprobs(qwen3_tied, samples))
        metrics = group.train(samples)
        assert metrics["num_samples_trained"] == 6
        assert metrics["grad_norm"] == pytest.approx(
            hf_policy_grad_norm(qwen3_tied, samples, 1.0), rel=1e-4)


def test_minibatch_shares_are_consecutive_and_never_empty() -> None:
    items = list(range(10))
    assert minibatch_shares(items, 3) == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    assert minibatch_shares(items[:2], 4) == [[0], [1]]
    assert minibatch_shares(items, 1) == [items]


@pytest.mark.slow
def test_two_minibatches_are_two_updates_against_the_rollout_policy(
        qwen3_tied: Path, ray_session: object) -> None:
    """The second update sees the first one's change (its logprobs are off the rollout's);
    with TIS, its importance weights are taken against the policy before the first update."""
    config = TrainConfig(algorithm="grpo", lr=5e-2, micro_batch_size=4, minibatches=2, tis_cap=2.0)
    with TrainGroup(str(qwen3_tied), config, tp=1, dp=1) as group:
        samples = make_samples(4, 4, seed=5, rewards=[0.0, 1.0])
        with_logprobs(samples, hf_logprobs(qwen3_tied, samples))
        metrics = group.train(samples)
        assert metrics["updates"] == 2 and metrics["num_samples_trained"] == 16
        assert math.isfinite(metrics["loss"]) and metrics["logprob_mismatch"] > 1e-4
        # engine logprobs are the trainer's own here, so the weights are 1 throughout
        assert metrics["tis_ratio_mean"] == pytest.approx(1.0, abs=1e-4)
        after = group.logprobs(samples)
        assert any(abs(a - b) > 1e-3 for s, row in zip(samples, after)
                   for a, b in zip(s.logprobs, row))


@pytest.mark.slow
def test_the_learning_rate_warms_up_and_decays_once_per_step(qwen3_tied: Path,
                                                               ray_session: object) -> None:
    """Warm-up over 2 steps, cosine to min_lr by step 4, then min_lr; a step of two
    mini-batches makes both updates at its step's rate."""
    config = TrainConfig(algorithm="grpo", lr=1e-2, min_lr=1e-3, warmup_steps=2,
                         lr_decay_style="cosine", lr_decay_steps=4, micro_batch_size=4,
                         minibatches=2)
    with TrainGroup(str(qwen3_tied), config, tp=1, dp=1) as group:
        samples = make_samples(2, 2, seed=6, rewards=[0.0, 1.0])
        with_logprobs(samples, hf_logprobs(qwen3_tied, samples))
        rates = []
        for _ in range(5):
            metrics = group.train(samples)
            assert metrics["updates"] == 2
            rates.append(metrics["lr"])
    # step 3 is halfway through the decay: cosine's factor is 0.5
    assert rates == pytest.approx([5e-3, 1e-2, 1e-3 + 0.5 * 9e-3, 1e-3, 1e-3])
