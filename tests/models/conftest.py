"""Fixtures of the model conformance suite: one tiny random model per architecture, built
once, and Megatron's logits and exports of all of them from one two-rank launch."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch
from architectures import ARCHITECTURES, build, model_type

HERE = pathlib.Path(__file__).parent


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    root = tmp_path_factory.mktemp("architectures")
    return {name: build(root / name, name, seed=i) for i, name in enumerate(ARCHITECTURES)}


@pytest.fixture(scope="session")
def probe_tokens() -> torch.Tensor:
    """Two rows of 160 random tokens: past the 64 original positions of the scaled RoPEs."""
    return torch.randint(0, 500, (2, 160), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="session")
def megatron_outputs(model_dirs: dict[str, pathlib.Path], probe_tokens: torch.Tensor,
                     tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """The folder where :mod:`megatron_ranks` left its logits and exports."""
    out = tmp_path_factory.mktemp("megatron")
    torch.save(probe_tokens, out / "tokens.pt")
    result = subprocess.run(
        [sys.executable, str(HERE / "megatron_ranks.py"), str(out), str(out / "tokens.pt"),
         *map(str, model_dirs.values())], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return out


# The coverage table of docs/models.md: `make docs-models` runs this suite with
# ROLLYARD_MODELS_TABLE set and the outcomes of the parametrized checks become its cells.

#: test function -> the table's column, in column order
CHECKS = {
    "test_megatron_logits_equal_transformers[tp=1]": "(a) logits, TP 1",
    "test_megatron_logits_equal_transformers[tp=2]": "(a) logits, TP 2",
    "test_expert_parallel_logits_equal_transformers[ep=2]": "(a) logits, EP 2",
    "test_conversion_round_trip_is_bit_exact": "(b) HF→Megatron→HF",
    "test_export_from_two_ranks_is_bit_exact": "(b) export, 2 ranks",
    "test_engine_logprobs_equal_teacher_forcing": "(c) engine logprobs",
    "test_engine_fused_layers_equal_transformers_layers": "(c) engine fast path",
    "test_two_training_steps_on_engine_samples": "(d) 2 steps + export",
}
_TABLE_START, _TABLE_END = "<!-- models table: start -->", "<!-- models table: end -->"
_outcomes: dict[tuple[str, str], str] = {}


def _cell(item_name: str, params: dict) -> tuple[str, str] | None:
    """(architecture, column) of a conformance test, None for other tests."""
    arch = params.get("arch")
    if arch is None:
        return None
    function = item_name.split("[")[0]
    for key in (f"{function}[tp={params['tp']}]" if "tp" in params else None,
                f"{function}[ep={params['ep']}]" if "ep" in params else None, function):
        if key in CHECKS:
            return arch, CHECKS[key]
    return None


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    callspec = getattr(item, "callspec", None)
    cell = _cell(item.name, callspec.params if callspec else {})
    if cell is None or (call.when != "call" and call.excinfo is None):
        return
    passed = call.excinfo is None
    if call.when == "call" or not passed:
        _outcomes[cell] = "✓" if passed else "✗"


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("ROLLYARD_MODELS_TABLE")
    if not target or not _outcomes:
        return
    archs = list(dict.fromkeys(arch for arch, _ in _outcomes))
    columns = [c for c in dict.fromkeys(CHECKS.values()) if any(c == k for _, k in _outcomes)]
    lines = ["| architecture | model type | embeddings | " + " | ".join(columns) + " |",
             "|---|---|---|" + "---|" * len(columns)]
    for arch in archs:
        cells = [_outcomes.get((arch, c), "—") for c in columns]
        tied = "tied" if ARCHITECTURES[arch][1].get("tie_word_embeddings") else "untied"
        lines.append(f"| {arch} | `{model_type(arch)}` | {tied} | " + " | ".join(cells) + " |")
    path = pathlib.Path(target)
    text = path.read_text()
    head, _, rest = text.partition(_TABLE_START)
    _, _, tail = rest.partition(_TABLE_END)
    path.write_text(f"{head}{_TABLE_START}\n" + "\n".join(lines) + f"\n{_TABLE_END}{tail}")
