"""Bad training layouts fail with a ConfigError naming the problem, before any process starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rollyard import ConfigError
from rollyard.training import TrainConfig, TrainGroup, check_layout

QWEN3 = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "vocab_size": 512, "rms_norm_eps": 1e-6, "hidden_act": "silu",
         "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}


def _model_dir(tmp_path: Path, weights: bool = True, **changes: object) -> str:
    """A model folder whose config is checked; the weights file only has to exist."""
    (tmp_path / "config.json").write_text(json.dumps({**QWEN3, **changes}))
    if weights:
        (tmp_path / "model.safetensors").write_bytes(b"")
    return str(tmp_path)


def test_a_valid_layout_passes(tmp_path: Path) -> None:
    check_layout(_model_dir(tmp_path), TrainConfig(global_batch_size=8), tp=2, dp=2, cpus=4)


@pytest.mark.parametrize(("tp", "message"), [
    (3, "tensor parallel size 3 does not divide num_attention_heads=4"),
    (4, "tensor parallel size 4 does not divide num_key_value_heads=2"),
])
def test_tensor_parallel_must_divide_heads(tmp_path: Path, tp: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_layout(_model_dir(tmp_path), TrainConfig(), tp=tp, dp=1)


def test_data_parallel_must_divide_the_batch(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data parallel size 3 does not divide the batch of 8"):
        check_layout(_model_dir(tmp_path), TrainConfig(global_batch_size=8), tp=1, dp=3)


def test_more_ranks_than_cpus(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"needs 4 ranks \(tp=2 x dp=2\).*only 2 CPUs"):
        check_layout(_model_dir(tmp_path), TrainConfig(), tp=2, dp=2, cpus=2)


@pytest.mark.parametrize(("changes", "message"), [
    ({"model_type": "gemma2"}, "model_type 'gemma2' is not supported"),
    ({"attention_bias": True}, "attention_bias=true is not supported"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 5e5}}, "rope type 'dynamic'"),
])
def test_unsupported_models_are_named(tmp_path: Path, changes: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_layout(_model_dir(tmp_path, **changes), TrainConfig(), tp=1, dp=1)


@pytest.mark.parametrize(("config", "message"), [
    (TrainConfig(lr=0.0), "TrainConfig.lr 0.0: must be greater than 0"),
    (TrainConfig(clip_eps=-0.1), "TrainConfig.clip_eps is -0.1"),
    (TrainConfig(temperature=float("nan")), "TrainConfig.temperature: nan is not a finite"),
    (TrainConfig(lr_decay_style="cosine"), "needs lr_decay_steps"),
    (TrainConfig(lr_decay_style="step", lr_decay_steps=10), "lr_decay_style 'step': choose one of"),
    (TrainConfig(micro_batch_tokens=0), "TrainConfig.micro_batch_tokens 0: must be"),
])
def test_bad_train_config_fields_are_named(tmp_path: Path, config: TrainConfig,
                                           message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_layout(_model_dir(tmp_path), config, tp=1, dp=1)


def test_a_folder_without_config_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no config\.json"):
        check_layout(str(tmp_path), TrainConfig(), tp=1, dp=1)


def test_a_folder_without_weights_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no model\.safetensors .*weights are required"):
        check_layout(_model_dir(tmp_path, weights=False), TrainConfig(), tp=1, dp=1)


def test_train_group_checks_cpus_of_the_ray_cluster(tmp_path: Path, ray_session) -> None:
    with pytest.raises(ConfigError, match="only 2 CPUs"):
        TrainGroup(_model_dir(tmp_path), TrainConfig(), tp=2, dp=2)
