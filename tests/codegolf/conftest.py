"""Fixtures for the code-golf plugin: the shipped tasks, sandboxes with the default and with
short limits, a count of the programs the sandbox runs, and a tokenizer."""

from __future__ import annotations

from collections import Counter
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


@pytest.fixture
def sandbox_runs(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many times the real sandbox ran each program (a spy on ``Sandbox.run`` that still
    runs it; the empty program each new sandbox runs as its set-up probe is not counted)."""
    runs: Counter[str] = Counter()
    real_run = Sandbox.run

    def counted(self: Sandbox, code: str, stdin: str = "") -> Any:
        if code:
            runs[code] += 1
        return real_run(self, code, stdin)

    monkeypatch.setattr(Sandbox, "run", counted)
    return runs
