"""Models the trainer cannot take are refused in one line that names what and where, before
Ray starts and leaving nothing behind."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest
from rollyard.errors import ConfigError
from rollyard.training import TrainConfig, check_layout


def edited(model_dir: pathlib.Path, out: pathlib.Path, **fields) -> pathlib.Path:
    """A copy of ``model_dir`` whose config.json has ``fields`` set (None deletes)."""
    shutil.copytree(model_dir, out)
    config = json.loads((out / "config.json").read_text())
    config.update(fields)
    (out / "config.json").write_text(json.dumps(config))
    return out


def refusal(model_dir: pathlib.Path, tp: int = 1, dp: int = 1, ep: int = 1) -> str:
    with pytest.raises(ConfigError) as info:
        check_layout(str(model_dir), TrainConfig(), tp, dp, ep=ep)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_folder_without_config_or_weights(model_dirs, tmp_path) -> None:
    assert refusal(tmp_path) == (f"model folder {tmp_path}: no config.json (expected a Hugging "
                                 "Face model folder, e.g. from `rollyard init-model DIR`)")
    no_weights = edited(model_dirs["llama"], tmp_path / "no-weights")
    (no_weights / "model.safetensors").unlink()
    assert "no model.safetensors or model.safetensors.index.json" in refusal(no_weights)


def test_a_sharded_index_naming_a_missing_shard(model_dirs, tmp_path) -> None:
    folder = edited(model_dirs["llama"], tmp_path / "sharded")
    (folder / "model.safetensors").rename(folder / "model-00001-of-00002.safetensors")
    index = {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                            "model.norm.weight": "model-00002-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert refusal(folder).endswith("lists missing shards ['model-00002-of-00002.safetensors']")


@pytest.mark.parametrize("fields, expected", [
    ({"model_type": "gemma2"}, "model_type 'gemma2' is not supported by the Megatron trainer; "
                               "supported: llama, mistral, qwen2, qwen3, qwen3_moe, mixtral"),
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}},
     "rope type 'longrope' is not supported by the Megatron trainer; supported: default, "
     "linear, llama3, yarn"),
    ({"sliding_window": 64}, "sliding_window=64 is shorter than the context "
                             "(max_position_embeddings=256)"),
])
def test_an_architecture_not_covered_is_named_with_what_is(model_dirs, tmp_path, fields,
                                                           expected) -> None:
    source = "mistral" if "sliding_window" in fields else "llama"
    folder = edited(model_dirs[source], tmp_path / "edited", **fields)
    message = refusal(folder)
    assert message.startswith(f"{folder / 'config.json'}: {expected}"), message


def test_a_gguf_file_where_a_folder_is_expected(tmp_path) -> None:
    gguf = tmp_path / "model.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    assert refusal(gguf) == (f"model {gguf} is a file, not a folder; a GGUF checkpoint: "
                             "convert it to a model folder with `rollyard models import-gguf "
                             "FILE OUT`")


def test_tensor_parallelism_that_does_not_divide_the_heads(model_dirs) -> None:
    message = refusal(model_dirs["qwen2"], tp=3)
    assert "num_attention_heads" in message and "3" in message, message


@pytest.mark.parametrize("arch, layout, expected", [
    ("qwen3_moe", {"dp": 3, "ep": 3}, "expert parallel size 3 does not divide the 4 experts"),
    ("mixtral", {"dp": 1, "ep": 2}, "expert parallel size 2 does not divide the data-parallel "
                                    "size 1"),
    ("mixtral", {"tp": 2, "dp": 2, "ep": 2}, "--train-ep 2 with --train-tp 2: expert "
                                             "parallelism is supported with one"),
    ("qwen2", {"dp": 2, "ep": 2}, "expert parallel size 2: "),
])
def test_expert_parallelism_that_does_not_fit(model_dirs, arch, layout, expected) -> None:
    message = refusal(model_dirs[arch], **layout)
    assert message.startswith(expected), message


def test_moe_settings_not_reproduced(model_dirs, tmp_path) -> None:
    dense_layers = edited(model_dirs["qwen3_moe"], tmp_path / "dense", mlp_only_layers=[1])
    assert "every layer is a mixture of experts" in refusal(dense_layers)
    jitter = edited(model_dirs["mixtral"], tmp_path / "jitter", router_jitter_noise=0.1)
    assert "router_jitter_noise=0.1 is not supported" in refusal(jitter)


def test_the_cli_refuses_before_ray_and_leaves_nothing(rollyard_cli, model_dirs,
                                                       tmp_path) -> None:
    folder = edited(model_dirs["llama"], tmp_path / "gemma", model_type="gemma3_text")
    runs = tmp_path / "runs"
    result = rollyard_cli("train", "--model", str(folder), "--runs-dir", str(runs),
                          "--no-progress", timeout=300)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {folder / 'config.json'}: model_type 'gemma3_text' is not "
                      "supported by the Megatron trainer; supported: llama, mistral, qwen2, "
                      "qwen3, qwen3_moe, mixtral"], result.stderr
    assert "Traceback" not in result.stderr and "ray" not in result.stderr.lower()
    assert not runs.exists()


def test_the_docs_table_has_a_passing_row_per_architecture() -> None:
    """docs/models.md is regenerated (`make docs-models`) whenever an architecture is added."""
    from architectures import ARCHITECTURES

    text = (pathlib.Path(__file__).parents[2] / "docs" / "models.md").read_text()
    table = text.split("<!-- models table: start -->")[1].split("<!-- models table: end -->")[0]
    rows = {line.split("|")[1].strip(): line for line in table.strip().splitlines()[2:]}
    assert sorted(rows) == sorted(ARCHITECTURES)
    assert all("✗" not in row for row in rows.values())

