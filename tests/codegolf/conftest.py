"""Fixtures for the code-golf plugin: the shipped tasks, sandboxes with the default and with
short limits, a tokenizer, and (for the rollout tests) a tiny model served by the embedded
engine."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from rollyard_codegolf.sandbox import Sandbox, SandboxLimits
from rollyard_codegolf.tasks import CodegolfTask, load_tasks

#: Short limits keep the adversarial suite fast: 2 s wall, 1 s CPU per run.
FAST_LIMITS = SandboxLimits(wall_s=2.0, cpu_s=1)


@pytest.fixture(scope="session")
def tasks() -> dict[str, CodegolfTask]:
    return {t.id: t for t in load_tasks()}


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    """The default limits, as a run uses them."""
    return Sandbox()


@pytest.fixture(scope="session")
def strict_sandbox() -> Sandbox:
    """Short limits, for programs that are meant to run into them."""
    return Sandbox(FAST_LIMITS)


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    from rollyard.models.tokenizer import train_tokenizer

    return train_tokenizer()


@pytest.fixture(scope="session")
def codegolf_model_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    from rollyard.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("codegolf-model"), arch="qwen3", seed=0)


@pytest.fixture(scope="session")
def codegolf_engine(codegolf_model_dir: pathlib.Path,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The embedded engine serving the tiny model, for this folder's rollout tests."""
    from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine

    engine = EmbeddedEngine({"max_batch_size": 16, "threads": 1,
                             "log_dir": str(tmp_path_factory.mktemp("codegolf-engine-logs"))})
    handle = engine.launch(str(codegolf_model_dir), 0)
    try:
        yield handle
    finally:
        handle.stop()
