"""Turn verifiers traces (0.4) and legacy rollout states into rollyard Samples, and keep the
environment's metrics.

A verifiers trace is a message graph; each root-to-leaf branch is one token sequence whose
``sampled_mask`` marks the model's own tokens. One branch becomes one Sample: the prompt is
everything before the first sampled token, and the loss mask is the sampled mask after it,
so tokens the environment inserted between turns are masked out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rollyard import Sample, SampleStatus

from rollyard_verifiers.bridge import SessionRecord
from rollyard_verifiers.recorded import segments


def trace_samples(trace: Any, session: SessionRecord, task_id: str,
                  group_id: str) -> list[Sample]:
    """One Sample per trainable branch of ``trace`` (at least one, even for a trace that
    failed before its first model call). Status: failed > aborted > truncated > completed."""
    status, reason = _status(trace, session)
    usable = status in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED)
    reward, rewards = _rewards(trace) if usable else (0.0, {})
    weight_version = min(session.weight_versions, default=0)
    metadata: dict[str, Any] = {
        "trace_id": trace.id, "stop_condition": trace.stop_condition,
        "num_turns": trace.num_turns,
    }
    branches = [b for b in trace.branches if b.trainable]
    if not branches:
        return [Sample(tokens=[], prompt_len=0, loss_mask=[], logprobs=[], reward=reward,
                       rewards=rewards, status=status if not usable else SampleStatus.FAILED,
                       task_id=task_id, group_id=group_id, weight_version=weight_version,
                       metadata=metadata, failure=reason or "trace has no branch",
                       completion=trace.last_reply)]
    samples = []
    for branch in branches:
        tokens = [int(t) for t in branch.token_ids]
        mask = [bool(m) for m in branch.sampled_mask]
        logprobs = [float(lp) for lp in branch.logprobs]
        if not len(tokens) == len(mask) == len(logprobs):
            raise ValueError(f"trace {trace.id} branch {branch.index}: {len(tokens)} tokens, "
                             f"{len(mask)} mask entries, {len(logprobs)} logprobs")
        prompt_len = mask.index(True) if True in mask else len(tokens)
        samples.append(Sample(
            tokens=tokens, prompt_len=prompt_len,
            loss_mask=[int(m) for m in mask[prompt_len:]], logprobs=logprobs[prompt_len:],
            reward=reward, rewards=dict(rewards), status=status, task_id=task_id,
            group_id=group_id, weight_version=weight_version,
            metadata={**metadata, "branch": branch.index}, failure=reason,
            completion=trace.last_reply))
    return samples


#: Errors a legacy rollout records for what the model itself did (an empty reply: the end of
#: sequence at once). Its tokens were sampled and scored, so the sample trains like any other.
MODEL_OUTCOMES = frozenset({"EmptyModelResponseError"})


def legacy_samples(state: Any, session: SessionRecord, task_id: str,
                   group_id: str) -> list[Sample]:
    """One Sample per segment of the calls the bridge recorded for a legacy rollout
    (:mod:`rollyard_verifiers.recorded`); reward and components from the rubric's scoring."""
    status, reason = _legacy_status(state, session)
    usable = status in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED)
    reward, rewards = _legacy_rewards(state) if usable else (0.0, {})
    completion = _last_reply(state.get("completion"))
    metadata: dict[str, Any] = {
        "trace_id": state.get("trajectory_id"), "stop_condition": state.get("stop_condition"),
        "num_turns": len(session.calls),
    }
    found = segments(session.calls)
    if not found:
        return [Sample(tokens=[], prompt_len=0, loss_mask=[], logprobs=[], reward=reward,
                       rewards=rewards, status=status if not usable else SampleStatus.FAILED,
                       task_id=task_id, group_id=group_id, metadata=metadata,
                       failure=reason or "rollout made no model call", completion=completion)]
    weight_version = min(session.weight_versions, default=0)
    return [Sample(tokens=seg.tokens, prompt_len=seg.prompt_len, loss_mask=seg.loss_mask,
                   logprobs=seg.logprobs, reward=reward, rewards=dict(rewards), status=status,
                   task_id=task_id, group_id=group_id, weight_version=weight_version,
                   metadata={**metadata, "branch": i}, failure=reason, completion=completion)
            for i, seg in enumerate(found)]


def _legacy_status(state: Any, session: SessionRecord) -> tuple[SampleStatus, str | None]:
    if session.failed:
        return SampleStatus.FAILED, session.failed
    if session.aborted:
        return SampleStatus.ABORTED, session.aborted
    error = state.get("error")
    if error is not None and type(error).__name__ not in MODEL_OUTCOMES:
        cause = getattr(error, "__cause__", None) or error
        return SampleStatus.FAILED, f"{type(error).__name__}: {cause}"
    if state.get("is_truncated"):
        return SampleStatus.TRUNCATED, None
    return SampleStatus.COMPLETED, None


def _legacy_rewards(state: Any) -> tuple[float, dict[str, float]]:
    """The rubric's weighted sum and each reward function's value under its own name."""
    components = {str(k): float(v) for k, v in (state.get("metrics") or {}).items()}
    total = float(state.get("reward") or 0.0)
    if not math.isfinite(total) or not all(math.isfinite(v) for v in components.values()):
        raise ValueError(f"rollout {state.get('trajectory_id')} has a non-finite reward: "
                         f"{total!r}, {components!r}")
    return total, components


def _last_reply(completion: Any) -> str:
    """The text of the last assistant message of a legacy completion (or the text itself)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion or []):
        if message["role"] == "assistant":
            return str(message["content"] or "")
    return ""


def _status(trace: Any, session: SessionRecord) -> tuple[SampleStatus, str | None]:
    if session.failed:
        return SampleStatus.FAILED, session.failed
    if session.aborted:
        return SampleStatus.ABORTED, session.aborted
    if not trace.ok or trace.errors:
        errors = "; ".join(f"{e.type}: {e.message}" for e in trace.errors)
        return SampleStatus.FAILED, errors or "verifiers marked the trace as not ok"
    if trace.is_truncated:
        return SampleStatus.TRUNCATED, None
    return SampleStatus.COMPLETED, None


def _rewards(trace: Any) -> tuple[float, dict[str, float]]:
    """The trace's weighted total and each named component's unweighted score."""
    components = {name: float(r.score) for name, r in trace.rewards.items() if r is not None}
    total = float(trace.reward)
    if not math.isfinite(total) or not all(math.isfinite(v) for v in components.values()):
        raise ValueError(f"trace {trace.id} has a non-finite reward: {total!r}, {components!r}")
    return total, components


@dataclass
class EnvironmentMetrics:
    """Running sums behind the ``verifiers/*`` metrics."""

    traces: int = 0
    errors: int = 0
    truncated: int = 0
    turns: int = 0
    reward_sum: float = 0.0
    scored: int = 0

    def add(self, num_turns: int, samples: list[Sample]) -> None:
        """Count one trace (or legacy rollout) of ``num_turns`` turns and its samples."""
        self.traces += 1
        status = samples[0].status
        self.errors += status in (SampleStatus.FAILED, SampleStatus.ABORTED)
        self.truncated += status == SampleStatus.TRUNCATED
        self.turns += num_turns
        if samples[0].usable:
            self.reward_sum += samples[0].reward
            self.scored += 1

    def summary(self) -> dict[str, float]:
        """Means over the traces added so far; empty when there were none."""
        if not self.traces:
            return {}
        metrics = {
            "verifiers/error_rate": self.errors / self.traces,
            "verifiers/truncated_rate": self.truncated / self.traces,
            "verifiers/num_turns_mean": self.turns / self.traces,
        }
        if self.scored:
            metrics["verifiers/reward_mean"] = self.reward_sum / self.scored
        return metrics
