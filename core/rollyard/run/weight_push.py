"""How a run's new weights reach its engines after each update (``--weight-sync``).

``disk``: the trainer exports a Hugging Face folder and every engine loads it
(``/update_weights_from_disk``). ``distributed``: the trainer's rank 0 and every engine form
one process group (SGLang's ``/init_weights_update_group``; gloo on CPU, NCCL on GPU) once,
and each update is a broadcast from rank 0 while every engine receives it
(``/update_weights_from_distributed``); nothing touches the disk.

Either way an engine that died is relaunched and loads the current weights from disk: the
distributed sync exports a folder only then, and forms its group again with the new engine.
A group that cannot form fails within ``timeout_s`` with a message naming the engines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import uuid
from pathlib import Path
from typing import Any

from rollyard.errors import ConfigError, RollyardError, TransportError
from rollyard.run.engines import EngineFleet

log = logging.getLogger("rollyard.weight_sync")

WEIGHT_SYNC_MODES = ("disk", "distributed")
#: Seconds a weight-update group may take to form and one update to be received.
WEIGHT_SYNC_TIMEOUT_S = 120.0
#: Most bytes in one broadcast (one ``/update_weights_from_distributed`` call).
BUCKET_BYTES = 1 << 30
#: Exported weight folders kept in the run folder.
KEEP_EXPORTS = 2


class WeightSync:
    """Pushes the train group's weights to a fleet's engines; keeps what a restart needs."""

    mode = ""

    def __init__(self, run_dir: Path, fleet: EngineFleet, group: Any, *,
                 abort_running: bool = False) -> None:
        self.run_dir, self.fleet, self.group = run_dir, fleet, group
        #: Engines abort their running requests for a push (``--partial-rollouts``).
        self.abort_running = abort_running
        #: The latest exported folder, and the version it holds.
        self.weights_dir: str | None = None
        self.exported_version = 0
        #: The weight version the engines serve (0: the initial model).
        self.version = 0

    @property
    def update_options(self) -> dict[str, Any]:
        """Keyword arguments of the transport's update calls (none unless aborting, so a
        transport without ``--partial-rollouts`` support is called as before)."""
        return {"abort_running": True} if self.abort_running else {}

    def train_options(self) -> dict[str, Any]:
        """Keyword arguments of the train group's ``train`` call that precedes the next push
        (what the trainer can prepare for it at the end of its update)."""
        return {}

    @property
    def current_weights_dir(self) -> str | None:
        """The exported folder of the weights the engines serve; None when there is none
        (the initial model, or a distributed sync that exported nothing since)."""
        return self.weights_dir if self.exported_version == self.version else None

    async def export(self, version: int) -> str:
        """Write the current policy to ``weights/step-NNNNN`` (once per version); drop older
        exports but the last :data:`KEEP_EXPORTS`."""
        target = (self.run_dir / "weights" / f"step-{version:05d}").resolve()
        if self.weights_dir != str(target) or not (target / "config.json").exists():
            await asyncio.to_thread(self.group.export_hf, str(target))
            self.weights_dir, self.exported_version = str(target), version
        for old in sorted((self.run_dir / "weights").glob("step-*"))[:-KEEP_EXPORTS]:
            shutil.rmtree(old, ignore_errors=True)
        return self.weights_dir

    async def restart_dead(self, transport: Any) -> list[str]:
        """Relaunch every engine that died and make it serve the current weights."""
        return await self.fleet.restart_dead(transport, self.current_weights_dir, self.version)

    async def push(self, transport: Any, version: int) -> int:
        """Make every engine serve the policy as ``version``; returns how many dead engines
        were relaunched on the way."""
        raise NotImplementedError

    async def close(self, transport: Any) -> None:
        """Release what the sync holds (process groups). Never raises."""


class DiskWeightSync(WeightSync):
    """Export a Hugging Face folder, then ``/update_weights_from_disk`` on every engine."""

    mode = "disk"

    async def push(self, transport: Any, version: int) -> int:
        folder = await self.export(version)
        try:
            await transport.update_weights(folder, version, **self.update_options)
        except TransportError:
            # an engine that died is relaunched and loads these weights; a live engine that
            # refused them is a real error
            restarted = await self.fleet.restart_dead(transport, folder, version)
            if not restarted:
                raise
        else:
            restarted = []
        self.version = version
        return len(restarted)


class DistributedWeightSync(WeightSync):
    """One process group of the trainer's rank 0 and every engine; a broadcast per update."""

    mode = "distributed"

    def __init__(self, run_dir: Path, fleet: EngineFleet, group: Any, *,
                 abort_running: bool = False, timeout_s: float = WEIGHT_SYNC_TIMEOUT_S,
                 bucket_bytes: int = BUCKET_BYTES) -> None:
        super().__init__(run_dir, fleet, group, abort_running=abort_running)
        self.timeout_s, self.bucket_bytes = timeout_s, bucket_bytes
        self.group_name: str | None = None
        #: The group the last train step was asked to stage a broadcast for.
        self._staged_for: str | None = None
        self.buckets: list[list[Any]] | None = None
        #: Takes down a group that failed to form once its trainer side gave up.
        self._cleanup: asyncio.Future | None = None

    async def connect(self, transport: Any, *, port: int | None = None) -> None:
        """Form the weight-update group: the trainer's rank 0 hosts the rendezvous, every
        engine joins. Raises TransportError naming the engines within about ``timeout_s``
        when the group does not form (port taken, wrong world size, engine unreachable)."""
        from rollyard.weight_transfer import buckets

        if not getattr(transport, "supports_distributed_weight_sync", False):
            raise ConfigError(f"--weight-sync distributed: transport {transport.name!r} does "
                              "not implement the distributed weight update; use --weight-sync "
                              "disk")
        if self.buckets is None:
            specs = await asyncio.to_thread(self.group.weight_specs)
            self.buckets = buckets(specs, self.bucket_bytes)
        address, free = await asyncio.to_thread(self.group.weight_sync_address)
        port = port or free
        backend = await asyncio.to_thread(self.group.weight_sync_backend)
        sizes = await transport.weight_group_ranks()
        offsets, world = {}, 1
        for url in transport.urls:
            offsets[url] = world
            world += sizes.get(url, 1)
        name = f"rollyard-weights-{uuid.uuid4().hex[:8]}"
        trainer = asyncio.ensure_future(asyncio.to_thread(
            self.group.open_weight_sync, address, port, world, name, backend, self.timeout_s,
            self.buckets))
        engines = asyncio.ensure_future(transport.init_weights_update_group(
            master_address=address, master_port=port, rank_offsets=offsets, world_size=world,
            group_name=name, backend=backend, timeout=self.timeout_s))
        done, pending = await asyncio.wait({trainer, engines}, timeout=self.timeout_s + 10,
                                           return_when=asyncio.FIRST_EXCEPTION)
        failures = [task.exception() for task in done if task.exception() is not None]
        if not failures and not pending:
            self.group_name = name
            log.info("weight update group %s formed: rank 0 at %s:%d, engines %s", name,
                     address, port, offsets)
            return
        engines.cancel()
        urls = ", ".join(f"{url} (rank {rank})" for url, rank in offsets.items())
        reasons = "; ".join(str(exc) for exc in failures) or (
            f"no answer within {self.timeout_s + 10:g} s")
        failed_url = next((exc.url for exc in failures
                           if isinstance(exc, TransportError) and exc.url), None)
        self._cleanup = asyncio.ensure_future(self._discard(transport, name, trainer))
        raise TransportError(
            f"the weight update group of {world} ranks (training rank 0 at {address}:{port}, "
            f"backend {backend}; engines {urls}) did not form: {reasons}",
            url=failed_url or ", ".join(offsets))

    async def _discard(self, transport: Any, name: str, trainer: Any) -> None:
        """Take down a group that failed to form, once the trainer's side has given up."""
        with contextlib.suppress(BaseException):
            await trainer
        with contextlib.suppress(BaseException):
            await asyncio.to_thread(self.group.close_weight_sync, name)
        with contextlib.suppress(BaseException):
            await transport.destroy_weights_update_group(name)

    async def disconnect(self, transport: Any) -> None:
        """Leave the group on every side (engines that are gone are skipped)."""
        name, self.group_name = self.group_name, None
        if name is None:
            return
        with contextlib.suppress(Exception):
            await transport.destroy_weights_update_group(name)
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.group.close_weight_sync, name)

    async def restart_dead(self, transport: Any, version: int | None = None) -> list[str]:
        """Relaunch dead engines; they (and the others) load weight ``version`` (default: the
        one served) from a folder exported now. The group forms again at the next push."""
        if self.fleet.engine is None:
            return []
        health = await transport.health()
        if all(health.get(h.url, False) for h in self.fleet.handles):
            return []
        await self.disconnect(transport)
        version = self.version if version is None else version
        folder = await self.export(version) if version else None
        restarted = await self.fleet.restart_dead(transport, folder, version)
        if restarted:
            self.version = version
        return restarted

    def train_options(self) -> dict[str, Any]:
        # rank 0 gathers the new weights and starts their broadcast as its update ends, so
        # the push's receive finds them on the way (the first push forms the group instead)
        self._staged_for = self.group_name
        return {} if self.group_name is None else {"then_broadcast": self.group_name}

    async def push(self, transport: Any, version: int) -> int:
        if self.group_name is None:
            await self.connect(transport)
        assert self.group_name is not None and self.buckets is not None
        name, buckets = self.group_name, self.buckets
        staged, self._staged_for = self._staged_for == name, None
        # After a train step that staged it, rank 0's broadcast already waits for the
        # engines, and their success says it went out: nothing to ask rank 0 (it checks the
        # broadcast's end before its next one). Otherwise rank 0 gathers and sends now; its
        # call goes out first, as it has the longer way to go (a Ray call, then the gather).
        send = None
        if not staged:
            send = asyncio.ensure_future(self._send(name))
            await asyncio.sleep(0)
        receive = asyncio.ensure_future(transport.update_weights_from_distributed(
            buckets, version, group_name=name, timeout=self.timeout_s, **self.update_options))
        try:
            await receive
            if send is not None:
                await send
        except Exception as exc:
            # the trainer's broadcast cannot finish without every receiver: it fails or times
            # out on its own; then the group is taken down on every side
            for task in filter(None, (receive, send)):
                with contextlib.suppress(BaseException):
                    await task
            await self.disconnect(transport)
            restarted = await self.restart_dead(transport, version)
            if not restarted:
                if isinstance(exc, RollyardError):
                    raise
                raise TransportError(f"in-memory weight update to version {version} failed: "
                                     f"{type(exc).__name__}: {exc}") from exc
            return len(restarted)
        self.version = version
        return 0

    async def _send(self, name: str) -> None:
        """The train group's broadcast, awaited on the event loop when it offers refs."""
        start = getattr(self.group, "start_broadcast", None)
        if start is None:
            await asyncio.to_thread(self.group.broadcast_weights, name)
            return
        from rollyard.training.group import await_all

        await await_all(start(name))

    async def close(self, transport: Any) -> None:
        with contextlib.suppress(Exception):
            await self.disconnect(transport)


def make_weight_sync(mode: str, run_dir: Path, fleet: EngineFleet, group: Any, *,
                     abort_running: bool = False) -> WeightSync:
    """The weight sync of ``--weight-sync MODE``; ``abort_running``: ``--partial-rollouts``."""
    if mode == "disk":
        return DiskWeightSync(run_dir, fleet, group, abort_running=abort_running)
    if mode == "distributed":
        return DistributedWeightSync(run_dir, fleet, group, abort_running=abort_running)
    raise ConfigError(f"--weight-sync {mode!r}: expected one of {list(WEIGHT_SYNC_MODES)}")
