"""In-memory weight sync on the wire: SGLang's distributed update protocol, both ends.

SGLang (0.5.23, ``/init_weights_update_group`` and ``/update_weights_from_distributed``)
joins the trainer's rank 0 (group rank 0, the sender) and every inference engine (ranks
``rank_offset + tp_rank``) in one ``torch.distributed`` process group built outside the
default group, over a TCP rendezvous hosted by rank 0; the trainer then broadcasts each
tensor (or one flattened ``uint8`` bucket of several, ``load_format: "flattened_bucket"``)
from rank 0, and every engine receives it into tensors of the announced names, dtypes and
shapes. This module holds what both ends share: the group construction SGLang uses
(``sglang.srt.utils.init_custom_process_group``), the bucket layout
(``sglang.srt.weight_sync.tensor_bucket.FlattenedTensorBucket``) and the request bodies.
torch is imported only inside the functions.
"""

from __future__ import annotations

import datetime
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: SGLang's default group name.
DEFAULT_GROUP_NAME = "weight_update_group"
#: ``load_format`` of one broadcast carrying many tensors as one flat byte tensor.
FLATTENED_BUCKET = "flattened_bucket"


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of an update: its Hugging Face name, dtype (``"float32"``) and shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:

        count = 1
        for size in self.shape:
            count *= size
        return count * torch_dtype(self.dtype).itemsize


def torch_dtype(name: str) -> torch.dtype:
    """``"float32"`` (or ``"torch.float32"``) as a torch dtype; ValueError naming it."""
    import torch

    dtype = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def buckets(specs: Sequence[TensorSpec], max_bytes: int) -> list[list[TensorSpec]]:
    """``specs`` in order, cut into runs of at most ``max_bytes`` (a bigger tensor alone)."""
    out: list[list[TensorSpec]] = []
    size = 0
    for spec in specs:
        if not out or (out[-1] and size + spec.nbytes > max_bytes):
            out.append([])
            size = 0
        out[-1].append(spec)
        size += spec.nbytes
    return out


def update_body(bucket: Sequence[TensorSpec], *, group_name: str = DEFAULT_GROUP_NAME,
                weight_version: str | None = None, flush_cache: bool = True,
                load_format: str | None = FLATTENED_BUCKET) -> dict[str, Any]:
    """The ``/update_weights_from_distributed`` body announcing ``bucket``."""
    body: dict[str, Any] = {
        "names": [s.name for s in bucket], "dtypes": [s.dtype for s in bucket],
        "shapes": [list(s.shape) for s in bucket], "group_name": group_name,
        "flush_cache": flush_cache, "load_format": load_format}
    if weight_version is not None:
        body["weight_version"] = weight_version
    return body


def init_process_group(*, backend: str, master_address: str, master_port: int,
                       world_size: int, rank: int, group_name: str,
                       timeout_s: float) -> Any:
    """A process group of ``world_size`` ranks outside (and without needing) the default
    group, as SGLang builds its weight-update group: a TCP rendezvous at
    ``master_address:master_port`` hosted by rank 0, keys under ``group_name``.

    Blocks until every rank has joined; raises (RuntimeError, ValueError or
    torch's DistStoreError) within about ``timeout_s`` when they do not.
    """
    from torch.distributed.distributed_c10d import (
        Backend,
        PrefixStore,
        _new_process_group_helper,
        _world,
        rendezvous,
    )

    timeout = datetime.timedelta(seconds=timeout_s)
    host = f"[{master_address}]" if ":" in master_address else master_address
    store, rank, world_size = next(rendezvous(f"tcp://{host}:{master_port}", rank, world_size,
                                              timeout=timeout))
    store.set_timeout(timeout)
    store = PrefixStore(group_name, store)
    pg, _ = _new_process_group_helper(world_size, rank, [], Backend(backend), store,
                                      group_name=group_name, timeout=timeout)
    _world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg


def destroy_process_group(pg: Any) -> None:
    """Leave a group made by :func:`init_process_group` (never raises)."""
    import torch.distributed as dist

    try:
        dist.destroy_process_group(pg)
    except Exception:  # a broken peer must not stop the teardown
        pass


def pack(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One flat ``uint8`` tensor of ``tensors`` back to back (SGLang's bucket layout)."""
    import torch

    return torch.cat([t.contiguous().reshape(-1).view(torch.uint8) for t in tensors])


def empty_bucket(bucket: Sequence[TensorSpec], device: Any = "cpu") -> torch.Tensor:
    import torch

    return torch.empty(sum(s.nbytes for s in bucket), dtype=torch.uint8, device=device)


def unpack(flat: torch.Tensor, bucket: Sequence[TensorSpec]) -> list[tuple[str, torch.Tensor]]:
    """Views of ``flat`` as the tensors of ``bucket``; ValueError on a size mismatch."""
    out = []
    offset = 0
    for spec in bucket:
        dtype = torch_dtype(spec.dtype)
        if offset % dtype.itemsize:
            raise ValueError(f"tensor {spec.name}: byte offset {offset} is not aligned to "
                             f"{spec.dtype}")
        end = offset + spec.nbytes
        out.append((spec.name, flat[offset:end].view(dtype).reshape(spec.shape)))
        offset = end
    if offset != flat.numel():
        raise ValueError(f"bucket of {flat.numel()} bytes holds {offset} bytes of tensors")
    return out


def specs_from_body(body: Any) -> tuple[list[TensorSpec], str | None]:
    """The tensors an ``/update_weights_from_distributed`` body announces, and its
    ``load_format``; ValueError naming the first bad field."""
    if not isinstance(body, dict):
        raise ValueError("the request body must be a JSON object")
    names, dtypes, shapes = body.get("names"), body.get("dtypes"), body.get("shapes")
    for field, value in (("names", names), ("dtypes", dtypes), ("shapes", shapes)):
        if not isinstance(value, list):
            raise ValueError(f"{field} (a list) is required")
    if not len(names) == len(dtypes) == len(shapes):
        raise ValueError(f"names, dtypes and shapes differ in length ({len(names)}, "
                         f"{len(dtypes)}, {len(shapes)})")
    if not names:
        raise ValueError("names is empty: nothing to update")
    specs = []
    for i, (name, dtype, shape) in enumerate(zip(names, dtypes, shapes)):
        if not isinstance(name, str) or not name:
            raise ValueError(f"names[{i}] is {name!r}; expected a tensor name")
        if not isinstance(dtype, str):
            raise ValueError(f"dtypes[{i}] is {dtype!r}; expected a dtype name like 'float32'")
        torch_dtype(dtype)
        if (not isinstance(shape, list) or not all(isinstance(d, int) and
                                                   not isinstance(d, bool) and d >= 0
                                                   for d in shape)):
            raise ValueError(f"shapes[{i}] is {shape!r}; expected a list of sizes")
        specs.append(TensorSpec(name, dtype.removeprefix("torch."), tuple(shape)))
    load_format = body.get("load_format")
    if load_format not in (None, FLATTENED_BUCKET):
        raise ValueError(f"load_format {load_format!r} is not supported (null or "
                         f"{FLATTENED_BUCKET!r})")
    return specs, load_format


class JobThread:
    """Runs calls one at a time, in the order given, on one daemon thread started on first
    use: a broadcast or a receive waiting for its peers holds up neither the caller nor the
    process's exit, and a call does not wait for a new thread to be scheduled first."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, call: Callable[[], Any]) -> Future:
        """Queue ``call``; its result or exception in the returned Future."""
        future: Future = Future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        self._jobs.put((call, future))
        return future

    def _loop(self) -> None:
        while True:
            call, future = self._jobs.get()
            try:
                future.set_result(call())
            except BaseException as exc:
                future.set_exception(exc)
