"""Turn verifiers traces into rollyard Samples, and keep the environment's metrics.

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


def trace_samples(trace: Any, session: SessionRecord, task_id: str,
                  group_id: str) -> list[Sample]:
    """One Sample per trainable branch of ``trace`` (at least one, even for a trace that
    failed before its first model call). Status: failed > aborted > truncated > completed."""
    status, reason = _status(trace, session)
    usable = status in (SampleStatus.COMPLETED, SampleStatus.TRUNCATED)
    reward, rewards = _rewards(trace) if usable else (0.0, {})
    weight_version = min(session.weight_versions, default=0)
    metadata: dict[str, Any] = {
        "completion": trace.last_reply, "trace_id": trace.id,
        "stop_condition": trace.stop_condition, "num_turns": trace.num_turns,
    }
    if reason:
        metadata["failure"] = reason
    branches = [b for b in trace.branches if b.trainable]
    if not branches:
        return [Sample(tokens=[], prompt_len=0, loss_mask=[], logprobs=[], reward=reward,
                       rewards=rewards, status=status if not usable else SampleStatus.FAILED,
                       task_id=task_id, group_id=group_id, weight_version=weight_version,
                       metadata={**metadata, "failure": reason or "trace has no branch"})]
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
            metadata={**metadata, "branch": branch.index}))
    return samples


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

    def add(self, trace: Any, samples: list[Sample]) -> None:
        self.traces += 1
        status = samples[0].status
        self.errors += status in (SampleStatus.FAILED, SampleStatus.ABORTED)
        self.truncated += status == SampleStatus.TRUNCATED
        self.turns += trace.num_turns
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
