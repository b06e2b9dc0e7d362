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


@pytest.fixture(scope="session")
def legacy_env_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pre-0.4 test environments (``envs/*/pyproject.toml``) installed ``--no-deps`` into
    one folder for PYTHONPATH, as users install published ones: their own verifiers
    requirement is then read from their metadata, and their venvs are the matrix's."""
    import subprocess
    import sys

    site = tmp_path_factory.mktemp("vf-envs") / "site"
    uv = Path(sys.executable).with_name("uv")
    sources = [str(p.parent) for p in sorted(ENVS.glob("*/pyproject.toml"))]
    subprocess.run([str(uv), "pip", "install", "-q", "--no-deps", "--target", str(site),
                    *sources], check=True, capture_output=True)
    return site
