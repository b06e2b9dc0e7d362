"""Per-step metrics computed from a step's samples."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import fmean

from rollyard.run.group_draw import env_of
from rollyard.types import Sample, SampleStatus

#: The sample metrics a mixed run also reports per environment, as ``<key>/<env>``.
PER_ENVIRONMENT = ("samples/count", "reward/mean", "response/len_mean")


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


def environment_metrics(samples: list[Sample]) -> dict[str, float]:
    """With samples of several environments: ``samples/count/<env>``, ``reward/mean/<env>``,
    ``response/len_mean/<env>`` and ``reward/<reward>/<env>`` of each; {} for one."""
    by_env: dict[str, list[Sample]] = defaultdict(list)
    for sample in samples:
        by_env[env_of(sample)].append(sample)
    if len(by_env) < 2:
        return {}
    metrics: dict[str, float] = {}
    for env, own in by_env.items():
        for key, value in sample_metrics(own).items():
            if key in PER_ENVIRONMENT or (key.startswith("reward/") and key != "reward/mean"):
                metrics[f"{key}/{env}"] = value
    return metrics


def failure_reasons(samples: list[Sample], limit: int = 3) -> list[str]:
    reasons = Counter(s.failure or "?" for s in samples if not s.usable)
    return [f"{count}x {reason}" for reason, count in reasons.most_common(limit)]
