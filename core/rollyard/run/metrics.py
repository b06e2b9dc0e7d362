"""Per-step metrics computed from a step's samples."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import fmean

from rollyard.types import Sample, SampleStatus


def sample_metrics(samples: list[Sample]) -> dict[str, float]:
    total = len(samples) or 1
    statuses = Counter(s.status for s in samples)
    usable = [s for s in samples if s.usable]
    metrics: dict[str, float] = {
        "samples/count": float(len(samples)),
        "samples/failed_rate": statuses[SampleStatus.FAILED] / total,
        "samples/aborted_rate": statuses[SampleStatus.ABORTED] / total,
        "samples/truncated_rate": statuses[SampleStatus.TRUNCATED] / total,
        "reward/mean": fmean(s.reward for s in usable) if usable else 0.0,
        "response/len_mean": fmean(s.response_len for s in usable) if usable else 0.0,
        "response/tokens": float(sum(s.response_len for s in usable)),
    }
    components: dict[str, list[float]] = defaultdict(list)
    for sample in usable:
        for name, value in sample.rewards.items():
            components[name].append(value)
    metrics.update({f"reward/{name}": fmean(values) for name, values in components.items()})
    return metrics


def failure_reasons(samples: list[Sample], limit: int = 3) -> list[str]:
    reasons = Counter(s.metadata.get("failure", "?") for s in samples if not s.usable)
    return [f"{count}x {reason}" for reason, count in reasons.most_common(limit)]
