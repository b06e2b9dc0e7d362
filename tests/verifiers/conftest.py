"""Fixtures for the verifiers bridge: a tiny local model, its renderer, the embedded engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ENVS = Path(__file__).parent / "envs"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A freshly built tiny Qwen3 model with its ChatML tokenizer (nothing downloaded)."""
    from rollyard.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("verifiers-model"))


@pytest.fixture(scope="session")
def renderer(tiny_model_dir: Path) -> Any:
    """The renderer verifiers' train client would build for the tiny model."""
    from renderers import DefaultRendererConfig, create_renderer
    from renderers.base import load_tokenizer

    return create_renderer(load_tokenizer(str(tiny_model_dir)), DefaultRendererConfig())


@pytest.fixture
def test_envs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Put the verifiers environments shipped with these tests on ``sys.path``."""
    monkeypatch.syspath_prepend(str(ENVS))
    yield ENVS


@pytest.fixture(scope="session")
def engine_url(tiny_model_dir: Path) -> Iterator[str]:
    """The embedded engine serving the tiny model, as a real subprocess on loopback."""
    from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine

    handle = EmbeddedEngine({"threads": 1}).launch(str(tiny_model_dir), 0)
    try:
        yield handle.url
    finally:
        handle.stop()
