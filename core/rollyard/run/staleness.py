"""How many weight updates a sample is behind the policy that trains on it (``--async``).

A sample records the weight version that generated it; versions are the steps whose update
was pushed, so a step that trained nothing leaves a gap. Staleness counts the updates pushed
since the sample's version, not the difference of the numbers.

Metrics of a step in async mode: ``async/staleness_N`` (trained samples N updates behind, for
N = 0 … --max-staleness), ``async/staleness_mean``, ``async/staleness_max`` and
``async/dropped_stale`` (samples dropped for being more than --max-staleness behind; a group
is dropped whole, since its advantages are relative to all of it).
"""

from __future__ import annotations

import bisect
from collections import defaultdict

from rollyard.types import Sample


class VersionLog:
    """The weight versions pushed in this process, starting with the one served at start."""

    def __init__(self, current: int = 0) -> None:
        self._versions = [current]

    @property
    def current(self) -> int:
        return self._versions[-1]

    def pushed(self, version: int) -> None:
        if version != self._versions[-1]:
            self._versions.append(version)

    def behind(self, version: int) -> int:
        """Updates pushed after ``version`` (0: the current policy generated it)."""
        return len(self._versions) - bisect.bisect_right(self._versions, version)


def drop_stale(samples: list[Sample], log: VersionLog, bound: int,
               ) -> tuple[list[Sample], int]:
    """The samples of groups whose every usable sample is at most ``bound`` updates behind,
    and how many samples were dropped."""
    groups: dict[str, list[Sample]] = defaultdict(list)
    for sample in samples:
        groups[sample.group_id].append(sample)
    kept: list[Sample] = []
    for group in groups.values():
        if all(log.behind(s.weight_version) <= bound for s in group if s.usable):
            kept += group
    return kept, len(samples) - len(kept)


def staleness_metrics(trained: list[Sample], log: VersionLog, bound: int,
                      dropped: int) -> dict[str, float]:
    """The histogram of the trained samples' staleness, its mean and max, and ``dropped``."""
    ages = [log.behind(s.weight_version) for s in trained if s.usable]
    metrics = {f"async/staleness_{n}": float(ages.count(n)) for n in range(bound + 1)}
    metrics.update({"async/staleness_mean": sum(ages) / len(ages) if ages else 0.0,
                    "async/staleness_max": float(max(ages, default=0)),
                    "async/dropped_stale": float(dropped)})
    return metrics
