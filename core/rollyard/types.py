"""The values that cross plugin boundaries: tasks, sampling, generation and samples."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from rollyard.errors import SampleError

Message = dict[str, Any]
FinishReason = Literal["stop", "length"]


class SampleStatus(str, enum.Enum):
    """How an episode ended. Only completed and truncated samples carry a usable reward."""

    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"


@dataclass
class Task:
    """One problem an environment poses. ``data`` is the environment's own (answer, tests …)."""

    id: str
    prompt: list[Message] | str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    min_new_tokens: int = 0


@dataclass
class GenerateRequest:
    input_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    session_id: str | None = None


@dataclass
class GenerateResult:
    """Token-out half of a generation. An engine abort is raised, never returned."""

    output_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    weight_version: int = 0


@dataclass
class Sample:
    """One trajectory for training: prompt + response ids with per-response-token data."""

    tokens: list[int]
    prompt_len: int
    loss_mask: list[int]
    logprobs: list[float]
    reward: float = 0.0
    rewards: dict[str, float] = field(default_factory=dict)
    status: SampleStatus = SampleStatus.COMPLETED
    task_id: str = ""
    group_id: str = ""
    weight_version: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def lost(cls, task_id: str, group_id: str, status: SampleStatus, reason: str,
             prompt_ids: list[int] | None = None) -> Sample:
        """A sample standing for an episode that produced nothing usable; ``reason`` is kept
        in ``metadata["failure"]``."""
        prompt = list(prompt_ids or [])
        return cls(tokens=prompt, prompt_len=len(prompt), loss_mask=[], logprobs=[],
                   status=status, task_id=task_id, group_id=group_id,
                   metadata={"failure": reason})

    @property
    def response_len(self) -> int:
        return len(self.tokens) - self.prompt_len

    @property
    def response_ids(self) -> list[int]:
        return self.tokens[self.prompt_len :]

    @property
    def usable(self) -> bool:
        """Whether the trainer may learn from this sample."""
        return self.status in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED)

    def validate(self) -> None:
        """Check every length invariant and finiteness; raise SampleError naming the field."""

        def fail(field_name: str, problem: str) -> None:
            raise SampleError(self.task_id, field_name, problem)

        if not isinstance(self.status, SampleStatus):
            try:
                self.status = SampleStatus(self.status)
            except ValueError:
                fail("status", f"unknown status {self.status!r}; expected one of "
                     f"{[s.value for s in SampleStatus]}")
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.tokens):
            fail("tokens", "every token must be a non-negative int")
        if not isinstance(self.prompt_len, int) or not 0 <= self.prompt_len <= len(self.tokens):
            fail("prompt_len", f"{self.prompt_len!r} is outside 0..{len(self.tokens)}")
        n = self.response_len
        if len(self.loss_mask) != n:
            fail("loss_mask", f"has {len(self.loss_mask)} entries for {n} response tokens")
        if any(m not in (0, 1) for m in self.loss_mask):
            fail("loss_mask", "entries must be 0 or 1")
        if len(self.logprobs) != n:
            fail("logprobs", f"has {len(self.logprobs)} entries for {n} response tokens")
        for i, lp in enumerate(self.logprobs):
            if not isinstance(lp, (int, float)) or not math.isfinite(lp) or lp > 1e-6:
                fail("logprobs", f"entry {i} is {lp!r}; logprobs must be finite and <= 0")
        if not isinstance(self.reward, (int, float)) or not math.isfinite(self.reward):
            fail("reward", f"{self.reward!r} is not a finite number")
        for name, value in self.rewards.items():
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                fail(f"rewards[{name!r}]", f"{value!r} is not a finite number")
