"""Turn a GGUF checkpoint into a dequantized Hugging Face model folder.

The exchange format of the project is a Hugging Face folder (config.json, safetensors,
tokenizer files); the package index ships real models mostly as GGUF files (llama.cpp's
format, quantized). transformers reads a GGUF file and dequantizes it to float32, but refuses
to save the model it loaded ("quantized with gguf"), so the import rebuilds the model from the
configuration without its ``quantization_config``, loads the dequantized weights into it and
saves that: config.json, ``model.safetensors`` (float32), the tokenizer with its chat template
and a generation config whose end token is the tokenizer's end-of-turn token.

The file is checked before anything heavy runs (:func:`inspect_gguf`): a folder, a file that
is not GGUF, a truncated file, an architecture the trainer does not cover or a tensor type
``gguf`` cannot dequantize is one :class:`~rollyard.errors.ConfigError` line, and nothing is
written.
"""

from __future__ import annotations

import json
import pathlib
import shutil
from typing import Any

from rollyard.errors import ConfigError

#: GGUF ``general.architecture`` values the import accepts: the dense types the Megatron
#: trainer converts (llama.cpp stores Mistral models as ``llama``)
SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3")
_MAGIC = b"GGUF"


def _dequantizable_types() -> set[str]:
    from gguf import GGMLQuantizationType
    from gguf.quants import _type_traits

    plain = {GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16}
    return {t.name for t in plain | set(_type_traits)}


def _require_gguf(command: str) -> None:
    import importlib.util

    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"{command}: {' and '.join(missing)} not installed (reading GGUF "
                          "needs both); install them with `pip install 'gguf>=0.10' "
                          "'accelerate>=1.0'` (they come with `rollyard[train]`)")


def inspect_gguf(path: str | pathlib.Path, command: str = "import-gguf") -> None:
    """Check that ``path`` is a complete GGUF file of a supported architecture whose tensors
    can all be dequantized; ConfigError (one line naming the file) otherwise."""
    file = pathlib.Path(path)
    where = f"{command}: {file}"
    if file.is_dir():
        raise ConfigError(f"{where} is a folder; a .gguf file is expected (a Hugging Face "
                          "folder needs no import: pass it to --model as it is)")
    if not file.is_file():
        raise ConfigError(f"{where} does not exist")
    with file.open("rb") as fh:
        if fh.read(4) != _MAGIC:
            raise ConfigError(f"{where} is not a GGUF file (it does not start with 'GGUF')")
    _require_gguf(command)
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(file))
        tensors = list(reader.tensors)
    except (ValueError, IndexError, OSError, KeyError) as exc:
        raise ConfigError(f"{where} is truncated or damaged: the GGUF reader failed with "
                          f"{type(exc).__name__}: {exc}") from None
    architecture = _string_field(reader, "general.architecture") or "?"
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise ConfigError(f"{where}: GGUF architecture {architecture!r} is not supported "
                          f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
    unknown = sorted({tensor.tensor_type.name for tensor in tensors} - _dequantizable_types())
    if unknown:
        raise ConfigError(f"{where}: tensor type(s) {', '.join(unknown)} cannot be dequantized "
                          f"by the installed gguf package (supported: "
                          f"{', '.join(sorted(_dequantizable_types()))})")


def _string_field(reader: Any, key: str) -> str | None:
    field = reader.fields.get(key)
    return None if field is None else bytes(field.parts[-1]).decode("utf-8", "replace")


def import_gguf(path: str | pathlib.Path, out_dir: str | pathlib.Path,
                force: bool = False) -> pathlib.Path:
    """Write the dequantized Hugging Face folder of the GGUF file ``path`` to ``out_dir``.

    The folder is built next to ``out_dir`` and renamed into place, so a failure leaves
    nothing behind. Raises ConfigError for bad input (see :func:`inspect_gguf`) and for an
    ``out_dir`` that is not empty unless ``force``."""
    file, out = pathlib.Path(path), pathlib.Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"import-gguf: {out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"import-gguf: folder {out} is not empty; pass --force to replace it")
    inspect_gguf(file)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.with_name(f".{out.name}.importing")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _write_folder(file, staging)
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _write_folder(file: pathlib.Path, out: pathlib.Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(file.parent), gguf_file=file.name)
        loaded = AutoModelForCausalLM.from_pretrained(str(file.parent), gguf_file=file.name,
                                                      dtype=torch.float32)
        data = loaded.config.to_dict()
        data.pop("quantization_config", None)
        config = loaded.config.__class__.from_dict(data)
        config.dtype = "float32"
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.tie_weights()
        del loaded
        end = tokenizer.eos_token_id
        model.generation_config = GenerationConfig(
            bos_token_id=tokenizer.bos_token_id, eos_token_id=end,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    config_path = out / "config.json"
    written = json.loads(config_path.read_text())
    if written.pop("quantization_config", None) is not None:
        config_path.write_text(json.dumps(written, indent=2) + "\n")
