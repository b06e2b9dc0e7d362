"""Fixtures for the code-golf plugin: the shipped tasks, sandboxes with the default and with
short limits, a tokenizer, and (for the rollout tests) a tiny model served by the embedded
engine."""

from __future__ import annotations

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
