"""What the run loop saves in a checkpoint and restores from one.

A checkpoint holds everything that decides the rest of a run: the trainer's model, optimizer,
LR schedule and rng states (saved by the ranks, :mod:`rollyard.training.trainer_state`), the
policy as a Hugging Face folder (what the engines serve), each rollout worker's
``Rollout.state_dict()``, the task source (:mod:`rollyard.run.task_source`, whose rngs
are the run's), each task's best sample (``--replay-best``), the weight version and the
training time so far. Sampling seeds are derived from the run's seed, the step and the draw
index (:mod:`rollyard.seeding`), so they need no saving. metrics.jsonl and samples.jsonl are
cut back to the checkpoint's step by their logger (``on_run_start(..., resumed_step)``).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollyard.run.checkpoints import BEST_SAMPLES_FILE, Checkpoint, CheckpointStore
from rollyard.run.faults import fault_point
from rollyard.run.signals import StopSignals

#: The weights file of an exported HF folder (rollyard.training.hf_folder.WEIGHTS_FILE,
#: not imported: that module imports torch).
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class RolloutSnapshot:
    """The task cursor, every rollout worker's state and the best samples at one moment."""

    tasks: dict[str, Any]
    rollouts: list[Any]
    best: dict[str, Any]


async def take_snapshot(pool: Any, tasks: Any, best: Any) -> RolloutSnapshot:
    """The state of the task cursor, the rollout workers and the best samples
    (:class:`rollyard.run.best_replay.BestSamples`) now (no rollout may be drawing)."""
    cursor, kept = tasks.state_dict(), best.state_dict()
    return RolloutSnapshot(cursor, await asyncio.to_thread(pool.state_dicts), kept)


class RunCheckpoints:
    """The checkpoints of one run: when to save, saving, and restoring a resumed run."""

    def __init__(self, run_dir: Path, save_interval: int, stop: StopSignals,
                 resumed: Checkpoint | None = None) -> None:
        self.run_dir = run_dir
        self.store = CheckpointStore(run_dir)
        self.save_interval = save_interval
        self.stop = stop
        self.resumed = resumed
        #: The last step whose checkpoint exists (the resumed one's, or 0).
        self.saved_step = resumed.step if resumed else 0
        self.last: Checkpoint | None = resumed
        self._pending: asyncio.Future | None = None
        #: Seconds the loop spent on checkpoints (starting saves, waiting for them) since the
        #: last :meth:`take_seconds`.
        self._spent = 0.0
        #: Training seconds of earlier processes of this run.
        self.elapsed_before = float(resumed.state.get("elapsed_s", 0.0)) if resumed else 0.0
        self.started = time.perf_counter()

    @property
    def first_step(self) -> int:
        return self.saved_step + 1 if self.resumed else 1

    def elapsed(self) -> float:
        """Training seconds of the whole run: earlier processes and this one."""
        return self.elapsed_before + self.seconds_here()

    def seconds_here(self) -> float:
        """Training seconds of this process (what --max-seconds counts)."""
        return time.perf_counter() - self.started

    def due(self, step: int) -> bool:
        return bool(self.save_interval) and step % self.save_interval == 0

    def fault(self, point: str, step: int) -> None:
        fault_point(point, step, lambda: self.stop.requested)

    # ------------------------------------------------------------------ save

    async def save(self, step: int, session: Any, pool: Any, tasks: Any,
                   before: RolloutSnapshot | None = None) -> None:
        """Start the checkpoint of ``step`` (the step just finished).

        The driver's and the rollout workers' state is taken now, or is ``before``: the state
        taken before a rollout of a later step began (``--async``), which the checkpoint must
        not include. The trainer's is written in the background, while the next step's
        rollouts run, and :meth:`settle` waits for it before anything touches the trainer
        again (the next update, the end of the run)."""
        await self.settle()
        started = time.perf_counter()
        before = before or await take_snapshot(pool, tasks, session.best)
        state = {"weight_version": session.weight_version, "tasks": before.tasks,
                 "elapsed_s": self.elapsed(), "seed": session.config.seed}
        rollout_states, best = before.rollouts, before.best
        group, weights_dir = session.group, session.weights_dir

        def write(folder: Path) -> dict[str, Any]:
            group.save_checkpoint(str((folder / "trainer").resolve()))
            self.fault("save:trainer", step)
            self._write_policy(group, weights_dir, folder / "hf")
            with open(folder / "rollout.pkl", "wb") as fh:
                pickle.dump(rollout_states, fh)
            with open(folder / BEST_SAMPLES_FILE, "wb") as fh:
                pickle.dump(best, fh)
            return state

        self.saved_step = step
        self._pending = asyncio.ensure_future(asyncio.to_thread(
            self.store.save, step, write, lambda point: self.fault(point, step)))
        self._spent += time.perf_counter() - started

    async def settle(self) -> Checkpoint | None:
        """Wait for the save in progress, if any (raising its CheckpointError); the newest
        complete checkpoint."""
        pending, self._pending = self._pending, None
        if pending is not None:
            started = time.perf_counter()
            try:
                self.last = await pending
            finally:
                self._spent += time.perf_counter() - started
        return self.last

    def take_seconds(self) -> float:
        """Seconds the loop spent on checkpoints since the last call (``time/checkpoint_s``)."""
        spent, self._spent = self._spent, 0.0
        return spent

    @staticmethod
    def _write_policy(group: Any, weights_dir: str | None, target: Path) -> None:
        """The policy as a HF folder: a link to (or copy of) the weights the engines were just
        given, or a fresh export when there are none."""
        source = Path(weights_dir) if weights_dir else None
        if source is None or not (source / WEIGHTS_FILE).is_file():
            group.export_hf(str(target))
            return
        target.mkdir(parents=True)
        for item in source.iterdir():
            if item.is_file():
                try:
                    os.link(item, target / item.name)
                except OSError:
                    shutil.copy2(item, target / item.name)

    # ------------------------------------------------------------------ restore

    async def restore(self, session: Any, pool: Any, tasks: Any, transport: Any) -> None:
        """Put the driver, the rollout workers and the engines where the checkpoint left
        them (the trainer was restored when the train group was built)."""
        checkpoint = self.resumed
        if checkpoint is None:
            return
        self.store.discard_partial()
        states = pickle.loads(checkpoint.rollout_file.read_bytes())
        await asyncio.to_thread(pool.load_state_dicts, states)
        tasks.load_state_dict(checkpoint.state["tasks"])
        if checkpoint.best_samples_file.is_file():
            session.best.load_state_dict(pickle.loads(checkpoint.best_samples_file.read_bytes()))
        version = int(checkpoint.state["weight_version"])
        if version:  # the engines serve the restored policy, under its version, as before
            await session.push_weights(transport, version)
