"""The engine's end of SGLang's distributed weight update: named process groups and receives.

``/init_weights_update_group`` joins a group whose rank 0 is the trainer (this engine is rank
``rank_offset``: one engine is one tensor-parallel rank); ``/update_weights_from_distributed``
receives the announced tensors broadcast from rank 0 — one tensor at a time, or one flattened
``uint8`` bucket — and hands them to the scheduler, which copies them into the model between
steps (:meth:`Scheduler.load_tensors`). Receiving happens on its own thread, so a broadcast
never waits for running requests and running requests never wait for a broadcast; only the
copy into the parameters does, under the engine's weight-update policy.

The engine runs on CPU, so only the ``gloo`` backend is accepted. Group formation and every
receive give up after ``timeout_s`` (an engine option) rather than hang.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch
from rollyard.weight_transfer import (
    FLATTENED_BUCKET,
    JobThread,
    TensorSpec,
    destroy_process_group,
    empty_bucket,
    init_process_group,
    torch_dtype,
    unpack,
)

log = logging.getLogger("rollyard.embedded_engine")

#: Fields of ``/init_weights_update_group`` (SGLang ``InitWeightsUpdateGroupReqInput``).
INIT_FIELDS = ("master_address", "master_port", "rank_offset", "world_size", "group_name",
               "backend")


class GroupError(ValueError):
    """A group request the engine refuses or could not carry out; the message says why."""


def _int(body: dict[str, Any], name: str, minimum: int) -> int:
    value = body.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise GroupError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


class WeightUpdateGroups:
    """The weight-update process groups this engine belongs to, by name."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._groups: dict[str, Any] = {}
        self._lock = threading.Lock()
        #: Receives run one at a time, in the order the requests arrived.
        self._receiver = JobThread("weight-receive")
        #: The flattened bucket of the last receive and its tensors' views, kept for the next
        #: one of the same layout (a run announces the same buckets at every update).
        self._bucket: tuple[tuple[TensorSpec, ...], torch.Tensor, list] | None = None

    @property
    def names(self) -> list[str]:
        return sorted(self._groups)

    def init(self, body: Any) -> str:
        """Join the group ``body`` describes (blocking); returns SGLang's success message.
        Raises GroupError naming the bad field, or saying why the group did not form."""
        if not isinstance(body, dict):
            raise GroupError("the request body must be a JSON object")
        unknown = sorted(set(body) - set(INIT_FIELDS))
        if unknown:
            raise GroupError(f"unknown field(s) {unknown}; expected {list(INIT_FIELDS)}")
        address = body.get("master_address")
        if not isinstance(address, str) or not address:
            raise GroupError(f"master_address must be a host name or address, got {address!r}")
        port = _int(body, "master_port", 1)
        rank = _int(body, "rank_offset", 1)
        world = _int(body, "world_size", 2)
        if rank >= world:
            raise GroupError(f"rank_offset {rank} is not below world_size {world} (this engine "
                             f"would be rank {rank}; rank 0 is the trainer)")
        name = body.get("group_name", "weight_update_group")
        if not isinstance(name, str) or not name:
            raise GroupError(f"group_name must be a non-empty string, got {name!r}")
        backend = body.get("backend", "nccl")
        if backend != "gloo":
            raise GroupError(f"backend {backend!r} is not available: the embedded engine runs "
                             "on CPU, use 'gloo'")
        with self._lock:
            if name in self._groups:
                raise GroupError(f"group {name!r} already exists; destroy it first")
        try:
            pg = init_process_group(backend=backend, master_address=address, master_port=port,
                                    world_size=world, rank=rank, group_name=name,
                                    timeout_s=self.timeout_s)
        except Exception as exc:
            raise GroupError(f"Failed to initialize custom process group: joining the "
                             f"group of {world} ranks at {address}:{port} as rank {rank} "
                             f"failed (limit {self.timeout_s:g} s): {type(exc).__name__}: "
                             f"{exc}") from None
        with self._lock:
            self._groups[name] = pg
        log.info("joined weight update group %s as rank %d of %d (%s:%d)", name, rank, world,
                 address, port)
        return "Succeeded to initialize custom process group."

    def destroy(self, name: str) -> None:
        with self._lock:
            pg = self._groups.pop(name, None)
        if pg is None:
            raise GroupError("The group to be destroyed does not exist.")
        destroy_process_group(pg)

    def receive(self, specs: list[TensorSpec], name: str, load_format: str | None,
                then: Callable[[list[tuple[str, torch.Tensor]]], Any]) -> Future:
        """Start receiving the tensors of ``specs`` broadcast from rank 0 of group ``name``
        on the receive thread; the future resolves to what ``then``, called on the receive
        thread with the named tensors, returns (the tensors are valid during the call only:
        the next receive may reuse them)."""
        with self._lock:
            pg = self._groups.get(name)
        if pg is None:
            raise GroupError(f"Group {name} not in {self.names}. Please call "
                             "`init_weights_update_group` first.")

        def job() -> Any:
            return then(self._receive(pg, specs, load_format))

        return self._receiver.submit(job)

    def _receive(self, pg: Any, specs: list[TensorSpec],
                 load_format: str | None) -> list[tuple[str, torch.Tensor]]:
        import torch.distributed as dist

        if load_format == FLATTENED_BUCKET:
            layout = tuple(specs)
            if self._bucket is None or self._bucket[0] != layout:
                flat = empty_bucket(specs)
                self._bucket = (layout, flat, unpack(flat, specs))
            _, flat, tensors = self._bucket
            dist.broadcast(flat, group_src=0, group=pg)
            return tensors
        out = []
        for spec in specs:
            tensor = torch.empty(spec.shape, dtype=torch_dtype(spec.dtype))
            dist.broadcast(tensor, group_src=0, group=pg)
            out.append((spec.name, tensor))
        return out

    def close(self) -> None:
        for name in self.names:
            try:
                self.destroy(name)
            except GroupError:
                pass


def in_daemon_thread(call: Callable[[], Any], name: str) -> Future:
    """Run ``call`` on a new daemon thread; its result or exception in a Future. A join or a
    receive left waiting for a peer (until the group's timeout) never holds up the engine's
    exit, as a thread of an executor would."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
