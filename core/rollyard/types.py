"""The values that cross plugin boundaries: tasks, sampling, generation and samples."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from rollyard.errors import SampleError

Message = dict[str, Any]
FinishReason = Literal["stop", "length", "abort"]


class SampleStatus(str, enum.Enum):
    """How an episode ended. Only completed and truncated samples carry a usable reward."""

    COMPLETED = "completed"
    TRUNCATED = "truncated"
    ABORTED = "aborted"
    FAILED = "failed"


@dataclass
class Task:
    """One problem an environment poses. ``data`` is the environment's own (answer, tests …)."""

    #: Unique within the environment; names the task in samples, metrics and errors.
    id: str
    #: Chat messages (rendered with the tokenizer's chat template) or plain text (encoded as
    #: is, without special tokens).
    prompt: list[Message] | str
    #: The environment's own data (answer, tests …); rewards read it.
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class SamplingParams:
    """How one generation samples; a rollout finds the run's in ``context.sampling``."""

    #: Most tokens generated for one request (one turn).
    max_new_tokens: int = 64
    #: Sampling temperature; the trainer recomputes logprobs at the same one.
    temperature: float = 1.0
    #: Nucleus sampling: keep the smallest set of tokens whose probability reaches this
    #: (1.0: off).
    top_p: float = 1.0
    #: Keep only the k most likely tokens (-1: off).
    top_k: int = -1
    #: Generation stops after any of these; ``sample_single_turn`` and ``Conversation`` add the
    #: tokenizer's EOS.
    stop_token_ids: list[int] = field(default_factory=list)
    #: Seed of this request's sampling (None: the engine's own randomness).
    seed: int | None = None
    #: Stop tokens are ignored until this many tokens were generated.
    min_new_tokens: int = 0


@dataclass
class GenerateRequest:
    """Token-in half of a generation."""

    #: The whole context: the rendered prompt and, in a multi-turn episode, every turn since.
    input_ids: list[int]
    #: How to sample.
    sampling: SamplingParams = field(default_factory=SamplingParams)
    #: Requests with the same id go to the same engine (sticky routing keeps its KV cache).
    session_id: str | None = None


@dataclass
class GenerateResult:
    """Token-out half of a generation. An engine abort is raised, never returned."""

    #: The generated token ids, the stop token included when one ended the generation.
    output_ids: list[int]
    #: Logprob of each output id, ``log_softmax(logits / temperature)`` (one per id).
    logprobs: list[float]
    #: ``stop`` (a stop token) or ``length`` (``max_new_tokens`` reached); ``abort`` only in
    #: the partial result a :class:`rollyard.EngineAborted` carries.
    finish_reason: FinishReason
    #: Version of the weights that generated it (0: the initial model).
    weight_version: int = 0


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: The typed marks of a :class:`Sample`, each also kept under the ``metadata`` key of its
#: name, with how a value a plugin put under that key becomes the field's (None: it does not).
MARKS: dict[str, Callable[[Any], Any]] = {
    "failure": lambda value: str(value) if value else None,
    "completion": lambda value: value if isinstance(value, str) else None,
    "replayed_from_version": _int_or_none,
}


@dataclass
class Sample:
    """One trajectory for training: prompt + response ids with per-response-token data."""

    #: Prompt and response token ids.
    tokens: list[int]
    #: How many of ``tokens`` are the prompt; the rest is the response.
    prompt_len: int
    #: One per response token: 1 to train on it, 0 for tokens the environment inserted
    #: (tool output, a user turn) in a multi-turn episode.
    loss_mask: list[int]
    #: The engine's logprob of each response token (one per response token).
    logprobs: list[float]
    #: The total reward: the weighted sum of the rewards' scores.
    reward: float = 0.0
    #: Each reward's score by name (``name/key`` for a reward's named components).
    rewards: dict[str, float] = field(default_factory=dict)
    #: How the episode ended; only completed and truncated samples are trained on.
    status: SampleStatus = SampleStatus.COMPLETED
    #: The id of the task it answers.
    task_id: str = ""
    #: Shared by the samples of one ``run_group`` call; advantages are relative to it.
    group_id: str = ""
    #: Version of the weights that generated the response.
    weight_version: int = 0
    #: Whatever the environment keeps (shown in samples.jsonl). The marks below are also
    #: copied here under their own names, for plugins written before they were fields.
    metadata: dict[str, Any] = field(default_factory=dict)
    #: Why the sample was lost (a failed or aborted one); a reason (a non-empty string) on a
    #: completed or truncated sample fails it.
    failure: str | None = None
    #: The decoded response (the last reply of a multi-turn episode), what rewards read.
    completion: str | None = None
    #: A best-sample replay copy (``--replay-best``): the weight version that generated it.
    replayed_from_version: int | None = None

    def __post_init__(self) -> None:
        self.sync_marks()

    @classmethod
    def lost(cls, task_id: str, group_id: str, status: SampleStatus, reason: str,
             prompt_ids: list[int] | None = None, completion: str | None = None) -> Sample:
        """A sample standing for an episode that produced nothing usable, lost for
        ``reason``; ``completion`` is the text it decoded, if the rollout records one."""
        prompt = list(prompt_ids or [])
        return cls(tokens=prompt, prompt_len=len(prompt), loss_mask=[], logprobs=[],
                   status=status, task_id=task_id, group_id=group_id, failure=reason,
                   completion=completion)

    def fail(self, reason: str, status: SampleStatus = SampleStatus.FAILED) -> None:
        """Mark the sample lost for ``reason``: no reward, not trained on."""
        self.status, self.reward, self.failure = status, 0.0, reason
        self.sync_marks()

    def sync_marks(self) -> None:
        """Reconcile each mark (:data:`MARKS`) with its ``metadata`` key, which plugins written
        before the fields still read and write: a key a plugin set or changed since the last
        call, while the field stayed as it was, gives the field its value (when it has the
        field's type; a failure that is not empty is taken as its ``str``); otherwise a set
        field is written to the key. Then a failure reason on a usable sample fails it.
        Called when a sample is made and where plugin samples enter the core
        (:func:`rollyard.run.collect.checked`)."""
        if not isinstance(self.metadata, dict):
            return  # validate() names the field
        # (field, key) of each mark after the last call; a new dict each time, so that a
        # shallow copy of the sample never shares it
        seen: dict[str, tuple[Any, Any]] = dict(self.__dict__.get("_synced_marks", {}))
        for name, adopt in MARKS.items():
            value = getattr(self, name)
            last_value, last_key = seen.get(name, (None, None))
            key_changed = name in self.metadata and self.metadata[name] != last_key
            if key_changed and value == last_value \
                    and (adopted := adopt(self.metadata[name])) is not None:
                value = adopted
                setattr(self, name, value)
            elif value is not None and (value != last_value or name not in self.metadata):
                self.metadata[name] = value
            seen[name] = (value, self.metadata.get(name))
        self.__dict__["_synced_marks"] = seen
        if self.failure and self.usable:
            self.status, self.reward = SampleStatus.FAILED, 0.0

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
        if not isinstance(self.metadata, dict):
            fail("metadata", f"is a {type(self.metadata).__name__}, not a dict")
        for name, kind in (("failure", str), ("completion", str),
                           ("replayed_from_version", int)):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
                fail(name, f"{value!r} is not a {kind.__name__} or None")
