"""The trainer's end of in-memory weight sync: rank 0 broadcasts the policy to the engines.

Every rank of the first data-parallel replica gathers its tensor-parallel shards (the same
gather and Megatron-to-Hugging-Face conversion as the HF export), and global rank 0 — rank 0
of the weight-update group it shares with every engine — broadcasts the tensors bucket by
bucket (:mod:`rollyard.weight_transfer`). The ranks call these functions through small
methods of :class:`rollyard.training.worker.MegatronWorker`, which they only know as the few
attributes of a :class:`TrainRank`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

import torch

from rollyard.errors import RollyardError
from rollyard.training.convert import (
    ModelShape,
    global_expert_name,
    hf_shaped,
    megatron_to_hf_blocks,
)
from rollyard.training.cpu_compat import native_compute
from rollyard.weight_transfer import (
    JobThread,
    TensorSpec,
    destroy_process_group,
    dtype_name,
    empty_bucket,
    init_process_group,
    unpack,
)

#: Seconds a staged broadcast may still take to finish once its engines said they have it.
STAGED_BROADCAST_WAIT_S = 10.0


class TrainRank(Protocol):
    """What the gather and the broadcast read of a train rank (a ``MegatronWorker``)."""

    #: Global rank, and the tensor-, data- and expert-parallel layout it is part of.
    rank: int
    tp: int
    dp_rank: int
    ep: int
    #: The rank's Megatron model (its shards of the parameters).
    model: torch.nn.Module
    shape: ModelShape
    #: The dtype the engines receive the weights in.
    export_dtype: torch.dtype


def gather_hf_state(worker: TrainRank) -> dict[str, torch.Tensor] | None:
    """The full Hugging Face state dict (in the training dtype) on global rank 0, None on
    the other ranks. Every rank must call this: the tensor-parallel ranks of the first
    data-parallel replica gather their shards together. A tensor may be a view of a
    parameter (one rank): copy it, in the export dtype, before the next update."""
    blocks = gather_hf_blocks(worker)
    return None if blocks is None else hf_shaped(blocks)


@torch.no_grad()
def gather_hf_blocks(worker: TrainRank) -> dict[str, torch.Tensor] | None:
    """:func:`gather_hf_state` as :func:`rollyard.training.convert.megatron_to_hf_blocks`
    gives it: with one rank, every tensor is a view of a parameter."""
    with native_compute():  # plain tensor arithmetic, no literal CUDA device
        return _gather(worker)


def _gather(worker: TrainRank) -> dict[str, torch.Tensor] | None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    if worker.ep > 1:  # every rank: the expert-parallel groups span data-parallel ranks
        return _gather_experts(worker)
    if worker.dp_rank != 0:
        return None
    shards: list[dict[str, torch.Tensor]] = [{} for _ in range(worker.tp)]
    if worker.tp == 1:
        shards[0] = {name: param.detach() for name, param in worker.model.named_parameters()}
    else:
        group = parallel_state.get_tensor_model_parallel_group()
        for name, param in worker.model.named_parameters():
            parts = [torch.empty_like(param) for _ in range(worker.tp)]
            dist.all_gather(parts, param.detach().contiguous(), group=group)
            for rank, part in enumerate(parts):
                shards[rank][name] = part
    if worker.rank != 0:
        return None
    return megatron_to_hf_blocks(shards, worker.shape)


def _gather_experts(worker: TrainRank) -> dict[str, torch.Tensor] | None:
    """:func:`_gather` with expert parallelism (one tensor-parallel rank): each expert
    parameter is gathered over the expert-parallel group and named by its global index."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    group = parallel_state.get_expert_model_parallel_group()
    state: dict[str, torch.Tensor] = {}
    for name, param in worker.model.named_parameters():
        if ".local_experts." not in name:
            state[name] = param.detach()
            continue
        parts = [torch.empty_like(param) for _ in range(worker.ep)]
        dist.all_gather(parts, param.detach().contiguous(), group=group)
        for ep_rank, part in enumerate(parts):
            state[global_expert_name(name, ep_rank, worker.ep, worker.shape)] = part
    return megatron_to_hf_blocks([state], worker.shape) if worker.rank == 0 else None


def weight_specs(worker: TrainRank) -> list[TensorSpec] | None:
    """Names, dtypes and shapes of what :func:`broadcast` sends, in order (rank 0)."""
    state = gather_hf_state(worker)
    if state is None:
        return None
    dtype = dtype_name(worker.export_dtype)
    return [TensorSpec(name, dtype, tuple(t.shape)) for name, t in state.items()]


class RankZeroSender:
    """The process groups global rank 0 holds with engines, by group name, and the broadcasts
    a train step staged for them (see :meth:`stage_broadcast`)."""

    def __init__(self) -> None:
        self.groups: dict[str, Any] = {}
        #: Each group's buckets, one flat ``uint8`` tensor each and its tensors' views, made
        #: once when the group opens: a broadcast copies the policy into them (casting it to
        #: the export dtype on the way) and sends them.
        self.buckets: dict[str, list[tuple[torch.Tensor, list[tuple[str, torch.Tensor]]]]] = {}
        #: Broadcasts staged by a train step and not yet claimed by :meth:`send`, by group:
        #: the broadcasting thread's future on rank 0, None on the other ranks.
        self.staged: dict[str, Future | None] = {}
        #: With one tensor-parallel rank: the policy as views of the parameters (built once;
        #: the optimizer and checkpoint loads write the parameters in place), and each
        #: parameter's address when they were made, to notice one that was replaced.
        self._views: dict[str, torch.Tensor] | None = None
        self._addresses: list[tuple[torch.Tensor, int]] = []
        #: Where staged broadcasts copy the policy and wait for their receivers; set once
        #: the last one has copied it.
        self._broadcasts = JobThread("weight-broadcast")
        self._copying: threading.Event | None = None

    def open(self, *, master_address: str, master_port: int, world_size: int,
             group_name: str, backend: str, timeout_s: float,
             buckets: list[list[TensorSpec]], device: torch.device) -> None:
        self.close(group_name)
        try:
            self.groups[group_name] = init_process_group(
                backend=backend, master_address=master_address, master_port=master_port,
                world_size=world_size, rank=0, group_name=group_name, timeout_s=timeout_s)
        except Exception as exc:  # the driver shows this line, not Ray's traceback
            raise RollyardError(
                f"training rank 0 could not form weight update group {group_name!r} of "
                f"{world_size} ranks at {master_address}:{master_port} within {timeout_s:g} s: "
                f"{type(exc).__name__}: {exc}") from None
        flats = [empty_bucket(bucket, device) for bucket in buckets]
        self.buckets[group_name] = [(flat, unpack(flat, bucket))
                                    for flat, bucket in zip(flats, buckets)]

    def send(self, worker: TrainRank, group_name: str) -> None:
        """Broadcast the policy over group ``group_name`` (every rank calls this; only rank 0
        sends): wait for the broadcast the last train step staged, or gather and broadcast
        now when there is none. Raises RollyardError when a receiver died or stalled."""
        staged = group_name in self.staged
        if not staged:  # no train step staged it: start it now, and wait for the engines
            if worker.rank == 0 and group_name not in self.groups:
                raise RuntimeError(f"weight update group {group_name!r} is not open on rank 0")
            self.stage_broadcast(worker, group_name)
        pending = self.staged.pop(group_name)
        if pending is not None:
            _finished(pending, group_name, STAGED_BROADCAST_WAIT_S if staged else None)

    def stage_broadcast(self, worker: TrainRank, group_name: str) -> None:
        """Start the next broadcast over the group on a thread, which copies the policy into
        the group's buckets and waits there for the engines to receive (every rank calls
        this, straight after its last update of a step). The push's :meth:`send` then only
        waits for that thread, so neither the gather nor the Ray call that starts
        :meth:`send` delays the engines; :meth:`settle` must precede the next change of the
        weights. A group closed meanwhile (its engines restarted) is skipped: the next push
        forms a new one and sends at once."""
        previous = self.staged.pop(group_name, None)
        if previous is not None:
            _finished(previous, group_name, STAGED_BROADCAST_WAIT_S)
        state = self._policy(worker)
        if state is None:
            self.staged[group_name] = None
        elif group_name in self.groups:
            copied, send = threading.Event(), self._sender(group_name)

            def copy_and_send() -> None:
                try:
                    self._copy_in(state, group_name)
                finally:
                    copied.set()
                send()

            self._copying = copied
            self.staged[group_name] = self._broadcasts.submit(copy_and_send)

    def settle(self) -> None:
        """Wait until a staged broadcast has copied the weights it sends (call before
        changing them)."""
        if self._copying is not None:
            self._copying.wait()
            self._copying = None

    def _policy(self, worker: TrainRank) -> dict[str, torch.Tensor] | None:
        """The policy on rank 0 as :func:`gather_hf_blocks` gives it (None on other ranks):
        with one tensor-parallel and one expert-parallel rank, views of the parameters made
        once, else gathered."""
        if worker.tp > 1 or worker.ep > 1:
            return gather_hf_blocks(worker)
        if worker.rank != 0:
            return None
        if self._views is None or any(p.data_ptr() != a for p, a in self._addresses):
            self._views = gather_hf_blocks(worker)
            self._addresses = [(p, p.data_ptr()) for p in worker.model.parameters()]
        return self._views

    def _copy_in(self, state: dict[str, torch.Tensor], group_name: str) -> None:
        """Copy ``state`` into the group's buckets, in their dtype."""
        with native_compute(), torch.no_grad():
            for _, tensors in self.buckets[group_name]:
                for name, tensor in tensors:
                    source = state[name]
                    tensor.view(source.shape).copy_(source)

    def _sender(self, group_name: str) -> Callable[[], None]:
        """What sends the group's buckets, one flattened ``uint8`` broadcast each; it raises
        RollyardError when a receiver died or stalled, or the group was closed meanwhile."""
        import torch.distributed as dist

        pg, flats = self.groups[group_name], [flat for flat, _ in self.buckets[group_name]]

        def send() -> None:
            try:
                for flat in flats:
                    dist.broadcast(flat, group_src=0, group=pg)
            except Exception as exc:
                raise RollyardError(f"training rank 0: broadcasting the weights over group "
                                    f"{group_name!r} failed: {type(exc).__name__}: "
                                    f"{exc}") from None

        return send

    def close(self, group_name: str) -> None:
        """Leave the group; a staged broadcast still waiting fails with it."""
        self.staged.pop(group_name, None)
        pg = self.groups.pop(group_name, None)
        if pg is not None:
            destroy_process_group(pg)
        self.buckets.pop(group_name, None)


def _finished(broadcast: Future, group_name: str, timeout_s: float | None) -> None:
    """Wait for a broadcast to end; raises its error, or RuntimeError when it still waits
    for a receiver after ``timeout_s`` (None: the group's own timeout). A staged broadcast
    gets :data:`STAGED_BROADCAST_WAIT_S`: the engines' success said it went out."""
    try:
        broadcast.result(timeout=timeout_s)
    except TimeoutError:
        raise RuntimeError(f"the weight broadcast staged for group {group_name!r} was never "
                           "received: no push followed the train step that staged it") from None


def backend_for(device: torch.device) -> str:
    """The collective backend of a weight-update group: NCCL on GPU, gloo on CPU."""
    return "nccl" if device.type == "cuda" else "gloo"
