"""Fixtures for the verifiers bridge: a tiny local model, its renderer, the embedded engine."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ENVS = Path(__file__).parent / "envs"


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
def engine_url(embedded_engine: Any) -> str:
    """URL of the session's embedded engine serving the tiny model."""
    return embedded_engine.url
