"""Reading and writing Hugging Face model folders (config.json + safetensors + tokenizer)."""

from __future__ import annotations

import json
import pathlib
import shutil
from typing import Any

import torch

from rollyard.errors import ConfigError

WEIGHTS_FILE = "model.safetensors"
_INDEX_FILE = "model.safetensors.index.json"
# Everything in a model folder except weights travels unchanged with an export.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def read_hf_config(model_dir: str | pathlib.Path) -> dict[str, Any]:
    """The parsed ``config.json`` of a Hugging Face model folder."""
    folder = pathlib.Path(model_dir)
    if folder.is_file():
        hint = ("a GGUF checkpoint: convert it to a model folder with `rollyard models "
                "import-gguf FILE OUT`" if folder.suffix.lower() == ".gguf"
                else "a Hugging Face model folder is expected")
        raise ConfigError(f"model {model_dir} is a file, not a folder; {hint}")
    path = folder / "config.json"
    if not path.is_file():
        raise ConfigError(f"model folder {model_dir}: no config.json (expected a Hugging Face "
                          "model folder, e.g. from `rollyard init-model DIR`)")
    return json.loads(path.read_text())


def weight_files(model_dir: str | pathlib.Path) -> list[pathlib.Path]:
    """The safetensors files of a model folder: one ``model.safetensors`` or an indexed set."""
    folder = pathlib.Path(model_dir)
    if (folder / WEIGHTS_FILE).is_file():
        return [folder / WEIGHTS_FILE]
    if (folder / _INDEX_FILE).is_file():
        index = json.loads((folder / _INDEX_FILE).read_text())
        files = [folder / shard for shard in sorted(set(index["weight_map"].values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ConfigError(f"model folder {model_dir}: {_INDEX_FILE} lists missing shards "
                              f"{missing}")
        return files
    raise ConfigError(f"model folder {model_dir}: no {WEIGHTS_FILE} or {_INDEX_FILE} "
                      "(safetensors weights are required)")


def load_hf_weights(model_dir: str | pathlib.Path) -> dict[str, torch.Tensor]:
    """Every tensor of a model folder."""
    from safetensors.torch import load_file

    tensors: dict[str, torch.Tensor] = {}
    for path in weight_files(model_dir):
        tensors.update(load_file(path))
    return tensors


def write_hf_folder(out_dir: str | pathlib.Path, tensors: dict[str, torch.Tensor],
                    source_dir: str | pathlib.Path) -> pathlib.Path:
    """Write ``tensors`` as ``model.safetensors`` with every non-weight file of ``source_dir``.

    Generation config and tokenizer files are copied byte for byte, so the export is loadable
    by anything that loaded the source folder; so is config.json, unless the tensors' dtype
    is not the one it records (:func:`record_dtype`).
    """
    from safetensors.torch import save_file

    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for item in pathlib.Path(source_dir).iterdir():
        if item.is_file() and not item.name.endswith(_WEIGHT_SUFFIXES) \
                and item.name != _INDEX_FILE:
            shutil.copyfile(item, out / item.name)
    record_dtype(out / "config.json", next(iter(tensors.values())).dtype)
    tmp = out / (WEIGHTS_FILE + ".tmp")
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / WEIGHTS_FILE)
    stale_index = out / _INDEX_FILE
    if stale_index.exists():
        stale_index.unlink()
    return out


def record_dtype(config_file: pathlib.Path, dtype: torch.dtype) -> None:
    """Make ``config_file`` record ``dtype`` as transformers writes it (``"dtype":
    "bfloat16"``; also ``torch_dtype``, the key of older transformers versions, where the file has
    it). A file that records it already is left as it is."""
    if not config_file.is_file():
        return
    config = json.loads(config_file.read_text())
    name = str(dtype).removeprefix("torch.")
    keys = ["dtype"] + (["torch_dtype"] if "torch_dtype" in config else [])
    if all(config.get(key) == name for key in keys):
        return
    config.update({key: name for key in keys})
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
