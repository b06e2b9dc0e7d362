"""Where a step's time goes: the busy spans of the run's two sides on one clock.

The rollout side is busy while a rollout runs (engines generating, rewards scoring); the
trainer side while the train group updates the policy and pushes it to the engines. Over one
step — from the end of the previous step to the end of this one — each side's idle time is
the step's time minus its busy time, and the overlap is the time both were busy (0 in the
synchronous loop).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

ROLLOUT, TRAINER = "rollout", "trainer"


class PhaseClock:
    """Busy spans of each side; :meth:`report` sums them over a step."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self.now = now
        #: Each side's spans as [start, end]; end is None while the span is open.
        self._spans: dict[str, list[list]] = {ROLLOUT: [], TRAINER: []}
        self.mark = now()

    @contextlib.contextmanager
    def busy(self, side: str) -> Iterator[None]:
        """The side is busy inside the block."""
        span = [self.now(), None]
        self._spans[side].append(span)
        try:
            yield
        finally:
            span[1] = self.now()

    def report(self) -> dict[str, float]:
        """``time/step_s``, ``time/overlap_s``, ``time/idle_rollout_s`` and
        ``time/idle_trainer_s`` since the previous report (or the clock's start)."""
        since, until = self.mark, self.now()
        self.mark = until
        clipped = {side: [(max(start, since), min(until if end is None else end, until))
                          for start, end in spans if end is None or end > since]
                   for side, spans in self._spans.items()}
        for side, spans in self._spans.items():  # finished spans are counted
            self._spans[side] = [span for span in spans if span[1] is None]
        busy = {side: sum(max(0.0, end - start) for start, end in spans)
                for side, spans in clipped.items()}
        overlap = sum(max(0.0, min(e1, e2) - max(s1, s2))
                      for s1, e1 in clipped[ROLLOUT] for s2, e2 in clipped[TRAINER])
        step = until - since
        return {"time/step_s": step, "time/overlap_s": overlap,
                "time/idle_rollout_s": max(0.0, step - busy[ROLLOUT]),
                "time/idle_trainer_s": max(0.0, step - busy[TRAINER])}
