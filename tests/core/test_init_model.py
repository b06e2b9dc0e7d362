"""``rollyard init-model``: tiny Hugging Face models built from a config, reproducibly."""

from __future__ import annotations

import json
import string

import pytest
from rollyard.cli import main
from rollyard.models.tiny import build_tiny_model
from rollyard.models.tokenizer import IM_END, IM_START, train_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer()


def test_every_printable_ascii_character_is_one_token(tokenizer) -> None:
    for char in string.printable:
        assert len(tokenizer.encode(char, add_special_tokens=False)) == 1, repr(char)


def test_chatml_specials_and_template(tokenizer) -> None:
    assert tokenizer.eos_token == IM_END
    assert len(tokenizer) == 512
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "abc"}],
                                        add_generation_prompt=True, tokenize=False)
    assert ids == f"{IM_START}user\nabc{IM_END}\n{IM_START}assistant\n"
    encoded = tokenizer.encode(f"{IM_START}user{IM_END}", add_special_tokens=False)
    assert encoded[0] == tokenizer.convert_tokens_to_ids(IM_START)
    assert encoded[-1] == tokenizer.eos_token_id


def test_text_round_trips(tokenizer) -> None:
    text = "Reverse 'abc123' -> '321cba'!\n\tdef f(x): return x ** 2  # ok"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_the_same_seed_gives_the_same_files(tmp_path) -> None:
    first = build_tiny_model(tmp_path / "a", seed=3)
    again = build_tiny_model(tmp_path / "b", seed=3)
    other = build_tiny_model(tmp_path / "c", seed=4)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (first / name).read_bytes() == (again / name).read_bytes(), name
    assert (first / "model.safetensors").read_bytes() != (other / "model.safetensors").read_bytes()


@pytest.mark.parametrize("arch, model_type", [("qwen3", "qwen3"), ("llama", "llama")])
def test_model_loads_with_transformers(tmp_path, arch, model_type) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = build_tiny_model(tmp_path, arch=arch)
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == model_type
    assert (config["hidden_size"], config["num_hidden_layers"]) == (64, 2)
    assert config["num_key_value_heads"] == 2 and config["head_dim"] == 16
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert model.dtype == torch.float32
    assert model.config.eos_token_id == tok.eos_token_id
    assert model.config.vocab_size == len(tok)
    assert {"lm_head.weight", "model.embed_tokens.weight"} <= set(model.state_dict())


def test_unknown_arch_is_an_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="unknown arch 'qwen2'"):
        build_tiny_model(tmp_path, arch="qwen2")


def test_cli_writes_a_model_and_refuses_a_full_folder(tmp_path, capsys) -> None:
    target = tmp_path / "model"
    assert main(["init-model", str(target), "--arch", "llama", "--seed", "1"]) == 0
    assert json.loads((target / "config.json").read_text())["model_type"] == "llama"
    assert main(["init-model", str(target)]) == 1
    assert "is not empty; pass --force" in " ".join(capsys.readouterr().err.split())
    assert main(["init-model", str(target), "--force"]) == 0


def test_the_default_model_is_built_once_per_seed_into_the_cache(tmp_path, monkeypatch) -> None:
    """A run without --model takes the cached tiny model: built once, the same files as
    init-model's, and two processes building it at once both get the one complete folder."""
    import subprocess
    import sys

    from rollyard.models.cache import builder_fingerprint, cached_tiny_model

    monkeypatch.setenv("ROLLYARD_MODELS_CACHE", str(tmp_path / "cache"))
    build = [sys.executable, "-c",
             "from rollyard.models.cache import cached_tiny_model; print(cached_tiny_model(3))"]
    racing = [subprocess.Popen(build, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    folders = {proc.communicate(timeout=120)[0].strip() for proc in racing}
    assert all(proc.returncode == 0 for proc in racing)
    expected = tmp_path / "cache" / f"tiny-qwen3-tiny-seed3-{builder_fingerprint()}"
    assert folders == {str(expected)}
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [expected.name]
    stamp = (expected / "model.safetensors").stat().st_mtime_ns
    assert cached_tiny_model(3) == expected  # found, not built again
    assert (expected / "model.safetensors").stat().st_mtime_ns == stamp
    direct = build_tiny_model(tmp_path / "direct", seed=3)
    assert ((direct / "model.safetensors").read_bytes()
            == (expected / "model.safetensors").read_bytes())
