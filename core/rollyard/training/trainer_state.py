"""A training rank's share of a checkpoint.

Model and optimizer go through megatron-core's ``dist_checkpointing`` (the ``torch_dist``
format): a collective of every rank, each writing its own shards into ``FOLDER/megatron``, on
CPU over gloo as on GPUs. What is private to a rank — the LR schedule and the rng states
(torch, Python, NumPy, Megatron's tensor-parallel tracker) — goes to ``FOLDER/rank-NNNNN.pt``.
Loading into ranks of the same layout gives back the same bits: a resumed run's updates equal
an uninterrupted run's.
"""

from __future__ import annotations

import queue
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rollyard.errors import ConfigError

MEGATRON = "megatron"


def _sharded_state_dict(worker: Any, loading: bool) -> dict[str, Any]:
    model = worker.model.sharded_state_dict()
    return {"model": model,
            "optimizer": worker.optimizer.sharded_state_dict(model, is_loading=loading)}


def _rank_file(folder: Path, rank: int) -> Path:
    return folder / f"rank-{rank:05d}.pt"


def _rng_states() -> dict[str, Any]:
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate(),
                              "numpy": np.random.get_state(),
                              "tracker": get_cuda_rng_tracker().get_states()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    get_cuda_rng_tracker().set_states(states["tracker"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def _in_process_results_queue() -> None:
    """The ``torch_dist`` writer reports its results through a queue that it makes, on the
    first save, with a spawned ``multiprocessing`` Manager: one more process, about 3 s on a
    small CPU machine. Our saves are synchronous, so those results are put and taken in this
    process and a plain queue does. (A megatron-core without that module-level queue keeps
    its own way.)"""
    from megatron.core.dist_checkpointing.strategies import filesystem_async

    if getattr(filesystem_async, "_results_queue", False) is None:
        filesystem_async._results_queue = queue.Queue()


def _save_strategy() -> Any:
    """megatron-core's default ``torch_dist`` writer, with one writer process per rank on a
    CPU machine instead of two (each is a fork of the rank: ~50 ms saved per save of the tiny
    model, and the cores are busy anyway)."""
    from megatron.core.dist_checkpointing.strategies.torch import TorchDistSaveShardedStrategy

    return TorchDistSaveShardedStrategy("torch_dist", 1,
                                        thread_count=2 if torch.cuda.is_available() else 1)


def save_rank_state(worker: Any, folder: str | Path) -> None:
    """Write ``worker``'s share of the checkpoint into ``folder`` (every rank must call this:
    the model and optimizer save is a collective)."""
    from megatron.core import dist_checkpointing

    _in_process_results_queue()
    folder = Path(folder)
    (folder / MEGATRON).mkdir(parents=True, exist_ok=True)
    dist_checkpointing.save(_sharded_state_dict(worker, loading=False), str(folder / MEGATRON),
                            sharded_strategy=_save_strategy())
    torch.save({"scheduler": worker.scheduler.state_dict(), "rng": _rng_states()},
               _rank_file(folder, worker.rank))


def load_rank_state(worker: Any, folder: str | Path) -> None:
    """Load ``worker``'s share of the checkpoint in ``folder`` (a collective of every rank)."""
    from megatron.core import dist_checkpointing

    folder = Path(folder)
    own = _rank_file(folder, worker.rank)
    if not own.is_file():
        raise ConfigError(f"checkpoint {folder.parent}: no state for training rank "
                          f"{worker.rank} ({own.name}); it was written by a train group of "
                          "another layout")
    with torch.no_grad():
        state = dist_checkpointing.load(_sharded_state_dict(worker, loading=True),
                                        str(folder / MEGATRON))
    worker.model.load_state_dict(state["model"])
    worker.optimizer.load_state_dict(state["optimizer"])
    private = torch.load(own, weights_only=False)
    worker.scheduler.load_state_dict(private["scheduler"])
    _set_rng_states(private["rng"])
