"""The trainer's end of in-memory weight sync: rank 0 broadcasts the policy to the engines.

Every rank of the first data-parallel replica gathers its tensor-parallel shards (the same
gather and Megatron-to-Hugging-Face conversion as the HF export), and global rank 0 — rank 0
of the weight-update group it shares with every engine — broadcasts the tensors bucket by
bucket (:mod:`rollyard.weight_transfer`). The ranks call these functions through small
methods of :class:`rollyard.training.worker.MegatronWorker`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from rollyard.training.convert import megatron_to_hf
from rollyard.weight_transfer import TensorSpec, dtype_name

if TYPE_CHECKING:
    from rollyard.training.worker import MegatronWorker


@torch.no_grad()
def gather_hf_state(worker: MegatronWorker) -> dict[str, torch.Tensor] | None:
    """The full Hugging Face state dict (in the training dtype) on global rank 0, None on
    the other ranks. Every rank must call this: the tensor-parallel ranks of the first
    data-parallel replica gather their shards together. A tensor may be a view of a
    parameter (one rank): copy it, in the export dtype, before the next update."""
    from rollyard.training import cpu_compat

    with cpu_compat.native_compute():  # plain tensor arithmetic, no literal CUDA device
        return _gather_hf_state(worker)


def _gather_hf_state(worker: MegatronWorker) -> dict[str, torch.Tensor] | None:
    import torch.distributed as dist
    from megatron.core import parallel_state

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
    return megatron_to_hf(shards, worker.shape)


def weight_specs(worker: MegatronWorker) -> list[TensorSpec] | None:
    """Names, dtypes and shapes of what :func:`broadcast` sends, in order (rank 0)."""
    state = gather_hf_state(worker)
    if state is None:
        return None
    dtype = dtype_name(worker.export_dtype)
    return [TensorSpec(name, dtype, tuple(t.shape)) for name, t in state.items()]


class RankZeroSender:
    """The process groups global rank 0 holds with engines, by group name."""

    def __init__(self) -> None:
        self.groups: dict[str, Any] = {}
        #: Each group's buckets, one flat ``uint8`` tensor each and its tensors' views, made
        #: once when the group opens: a broadcast copies the policy into them (casting it to
        #: the export dtype on the way) and sends them.
        self.buckets: dict[str, list[tuple[torch.Tensor, list[tuple[str, torch.Tensor]]]]] = {}

    def open(self, *, master_address: str, master_port: int, world_size: int,
             group_name: str, backend: str, timeout_s: float,
             buckets: list[list[TensorSpec]], device: torch.device) -> None:
        from rollyard.errors import RollyardError
        from rollyard.weight_transfer import empty_bucket, init_process_group, unpack

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

    def send(self, worker: MegatronWorker, group_name: str) -> None:
        """Gather the policy and broadcast it, bucket by bucket as the group was opened with
        (every rank calls this; only rank 0 sends). A bucket is one flattened ``uint8``
        broadcast."""
        import torch.distributed as dist

        from rollyard.training import cpu_compat

        state = gather_hf_state(worker)
        if state is None:
            return
        if group_name not in self.groups:
            raise RuntimeError(f"weight update group {group_name!r} is not open on rank 0")
        pg = self.groups[group_name]
        try:
            for flat, tensors in self.buckets[group_name]:
                with cpu_compat.native_compute(), torch.no_grad():
                    for name, tensor in tensors:
                        tensor.copy_(state[name])
                dist.broadcast(flat, group_src=0, group=pg)
        except Exception as exc:  # a receiver died or stalled
            from rollyard.errors import RollyardError

            raise RollyardError(f"training rank 0: broadcasting the weights over group "
                                f"{group_name!r} failed: {type(exc).__name__}: {exc}") from None

    def close(self, group_name: str) -> None:
        from rollyard.weight_transfer import destroy_process_group

        pg = self.groups.pop(group_name, None)
        self.buckets.pop(group_name, None)
        if pg is not None:
            destroy_process_group(pg)


def sender_of(worker: MegatronWorker) -> RankZeroSender:
    sender = getattr(worker, "_weight_sender", None)
    if sender is None:
        sender = worker._weight_sender = RankZeroSender()
    return sender


def backend_for(device: torch.device) -> str:
    """The collective backend of a weight-update group: NCCL on GPU, gloo on CPU."""
    return "nccl" if device.type == "cuda" else "gloo"
