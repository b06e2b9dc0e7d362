"""Where a run's rollouts happen, as the loop sees it: a :class:`RolloutBackend`.

The loop hands a backend task indices and sampling seeds and gets samples back; it never sees
how the rollout plugin runs. :class:`rollyard.run.rollout_workers.RolloutPool` (Ray actors on
this cluster) is the implementation every run uses today; an environment served elsewhere
(another cluster, an HTTP service) is another implementation of the same methods. "Transport"
keeps meaning the inference client only.
"""

from __future__ import annotations

from typing import Any, Protocol

from rollyard.types import Sample


class RolloutBackend(Protocol):
    """One environment's rollouts: its tasks, its groups, its evaluation and its state."""

    def num_tasks(self, split: str) -> int:
        """How many tasks the environment's ``split`` holds."""
        ...

    def collect(self, tasks: list[int], seeds: list[int | None] | None = None,
                step: int = 0) -> tuple[list[Sample], dict[str, float]]:
        """One scored group per training task index (``seeds``: each group's sampling seed;
        ``step``: the run's step); a lost group comes back as failed samples, never as an
        exception. Also the environment's metrics (``env/…``)."""
        ...

    def evaluate(self, tasks: list[int], seeds: list[int | None],
                 ) -> tuple[list[Sample], list[bool], dict[str, float]]:
        """``--eval-samples`` episodes of each eval task index: the samples, whether each
        solved its task, and the metrics."""
        ...

    def state_dicts(self) -> list[Any]:
        """The rollouts' states (picklable), saved with a checkpoint."""
        ...

    def load_state_dicts(self, states: list[Any]) -> None:
        """Continue from :meth:`state_dicts` of a checkpoint."""
        ...

    def close(self, graceful: bool = True) -> None:
        """Release everything (``graceful``: let the plugins close first)."""
        ...
