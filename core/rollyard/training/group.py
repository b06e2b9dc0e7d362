"""The train group: ``tp * dp`` Megatron ranks as Ray actors in one placement group.

The driver side of training. It checks the layout and the algorithm before starting
anything, drops groups without signal, computes the algorithm's advantages, deals samples to
the data-parallel replicas and merges the ranks' metrics.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

from rollyard.algorithms import StepInfo, group_indices
from rollyard.errors import ConfigError, PluginError, RollyardError
from rollyard.model_facts import fail_if_too_long, model_max_tokens, rewards_differ
from rollyard.training.algorithm import load_algorithm
from rollyard.training.batching import TrainItem, check_item, split_for_data_parallel
from rollyard.training.config import TrainConfig
from rollyard.training.hf_folder import read_hf_config, weight_files
from rollyard.training.model import check_hf_config, check_tensor_parallel
from rollyard.training.worker import MegatronWorker
from rollyard.types import Sample

PLACEMENT_TIMEOUT_S = 120.0
#: summed over the data-parallel replicas: each rank's share of the step's loss
_SHARES = ("loss", "policy_loss")
#: token sums on the ranks, reported per trained token
_PER_TOKEN = ("kl", "entropy", "clip_fraction", "logprob_mismatch")


def check_layout(model_dir: str, config: TrainConfig, tp: int, dp: int,
                 cpus: float | None = None, ep: int = 1) -> None:
    """ConfigError for any layout that cannot train, before a process is started."""
    config.validate()
    for name, size in (("tp", tp), ("dp", dp), ("ep", ep)):
        if not isinstance(size, int) or size < 1:
            raise ConfigError(f"train group: {name}={size!r}; expected a positive integer")
    hf_config = read_hf_config(model_dir)
    where = os.path.join(model_dir, "config.json")
    check_tensor_parallel(check_hf_config(hf_config, where), tp, where, ep, dp)
    weight_files(model_dir)
    if config.global_batch_size is not None and config.global_batch_size % dp:
        raise ConfigError(f"data parallel size {dp} does not divide the batch of "
                          f"{config.global_batch_size} samples per step; choose a --train-dp "
                          "that divides it")
    if cpus is not None and tp * dp > cpus:
        raise ConfigError(f"train group needs {tp * dp} ranks (tp={tp} x dp={dp}) but the Ray "
                          f"cluster has only {cpus:g} CPUs; lower --train-tp/--train-dp or "
                          "raise --num-cpus")


def _to_item(sample: Sample, advantage: float = 0.0) -> TrainItem:
    return TrainItem(sample.tokens, sample.prompt_len, sample.loss_mask, sample.logprobs,
                     advantage)


def minibatch_shares(items: list[TrainItem], count: int) -> list[list[TrainItem]]:
    """``items`` in at most ``count`` consecutive shares of near-equal size (never empty)."""
    count = max(1, min(count, len(items)))
    bounds = [round(i * len(items) / count) for i in range(count + 1)]
    return [items[bounds[i]: bounds[i + 1]] for i in range(count)]


def _get_all(refs: list[Any]) -> list[Any]:
    """Results of every rank, raising the first failure as soon as it happens.

    A plain ``ray.get(refs)`` would wait on the healthy ranks, which block in a collective
    with the dead one until the process-group timeout.
    """
    import ray
    from ray.exceptions import RayTaskError

    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ray.get(done)
        return ray.get(refs)
    except RayTaskError as exc:
        if isinstance(exc.cause, RollyardError):  # the rank's own message, not Ray's wrapper
            raise exc.cause from None
        raise


async def await_all(refs: list[Any]) -> list[Any]:
    """:func:`_get_all` for asyncio: the ranks' results, a rank's own RollyardError raised as
    itself."""
    import asyncio

    from ray.exceptions import RayTaskError

    try:
        return list(await asyncio.gather(*refs))
    except RayTaskError as exc:
        if isinstance(exc.cause, RollyardError):
            raise exc.cause from None
        raise


class TrainGroup:
    """Megatron policy trainer on Ray. Ray must be initialised by the caller.

    ``ep`` spreads a mixture of experts' experts over that many of the ``dp`` ranks."""

    def __init__(self, model_dir: str, config: TrainConfig | None = None, tp: int = 1,
                 dp: int = 1, ep: int = 1) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if not ray.is_initialized():
            raise ConfigError("TrainGroup needs Ray: call ray.init() (or pass --ray-address) "
                              "before creating it")
        self.config = config or TrainConfig()
        resources = ray.cluster_resources()
        check_layout(model_dir, self.config, tp, dp, resources.get("CPU", 0.0), ep)
        self.algorithm, self._algorithm_plugin = load_algorithm(self.config)
        self.model_dir, self.tp, self.dp, self.ep = model_dir, tp, dp, ep
        hf_config = read_hf_config(model_dir)
        self.max_len = model_max_tokens(model_dir)
        self.vocab_size = int(hf_config["vocab_size"])
        world = tp * dp
        use_gpu = resources.get("GPU", 0.0) >= world
        bundle = {"CPU": 1.0, "GPU": 1.0} if use_gpu else {"CPU": 1.0}
        self._pg = placement_group([dict(bundle) for _ in range(world)], strategy="PACK")
        self._actors: list[Any] = []
        try:
            ready, _ = ray.wait([self._pg.ready()], timeout=PLACEMENT_TIMEOUT_S)
            if not ready:
                raise ConfigError(f"train group: Ray could not place {world} ranks of {bundle} "
                                  f"within {PLACEMENT_TIMEOUT_S:g} s; free resources are "
                                  f"{ray.available_resources()}")
            remote = ray.remote(MegatronWorker)
            self._actors = [
                remote.options(
                    num_cpus=1, num_gpus=1 if use_gpu else 0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        self._pg, placement_group_bundle_index=rank),
                ).remote(model_dir, self.config, tp, dp, rank, ep)
                for rank in range(world)]
            address, port = ray.get(self._actors[0].free_address.remote())
            _get_all([actor.setup.remote(address, port) for actor in self._actors])
        except BaseException:
            self.shutdown()
            raise

    @property
    def _scorers(self) -> list[Any]:
        """The ranks that compute logprobs together: rank 0's tensor-parallel group, and
        with expert parallelism its expert-parallel group (they exchange tokens)."""
        return self._actors[: self.tp * self.ep]

    @property
    def filters_zero_variance(self) -> bool:
        """Whether groups whose rewards are all equal are dropped. A run that keeps them
        (``TrainConfig.filter_zero_variance=False``, ``--keep-zero-variance-groups``) keeps
        them whatever the algorithm; otherwise the algorithm's choice, if it makes one."""
        choice = self.algorithm.filters_zero_variance
        if not self.config.filter_zero_variance or choice is None:
            return self.config.filter_zero_variance
        return bool(choice)

    def _advantages(self, samples: list[Sample], step: StepInfo) -> list[float]:
        """The algorithm's advantages, checked at the plugin boundary."""
        record = self._algorithm_plugin
        where = {"distribution": record.distribution, "entry_point": record.entry_point}
        name = self.algorithm.name
        try:
            values = [float(v) for v in self.algorithm.advantages(samples, step)]
        except Exception as exc:
            raise PluginError(f"algorithm {name!r}: advantages raised "
                              f"{type(exc).__name__}: {exc}", **where) from exc
        if len(values) != len(samples):
            raise PluginError(f"algorithm {name!r}: advantages returned {len(values)} values "
                              f"for {len(samples)} samples", **where)
        for sample, value in zip(samples, values):
            if not math.isfinite(value):
                raise PluginError(f"algorithm {name!r}: advantage {value} for a sample of task "
                                  f"{sample.task_id!r}", **where)
        return values

    def _items(self, samples: list[Sample]) -> tuple[list[TrainItem], StepInfo,
                                                       dict[str, float]]:
        """The samples that are trained on, as items with the algorithm's advantages; the
        step's sizes; group counts. A sample longer than the model's context is failed in
        place (status, ``failure``), left out and counted, never fatal."""
        count = len(samples)
        samples = [s for s in samples if not fail_if_too_long(s, self.max_len)]
        too_long = count - len(samples)
        for sample in samples:
            check_item(_to_item(sample), f"sample of task {sample.task_id!r}", self.max_len,
                       self.vocab_size)
        groups = group_indices([s.group_id for s in samples])
        flat = {group for group, indices in groups.items()
                if not rewards_differ([samples[i].reward for i in indices])}
        dropped = flat if self.filters_zero_variance else set()
        kept = [s for s in samples if s.group_id not in dropped]
        longest = max((s.response_len for s in kept), default=1)
        step = StepInfo(sequences=len(kept),
                        tokens=float(sum(sum(s.loss_mask) for s in kept)),
                        max_response_len=self.config.max_new_tokens or longest)
        items = [_to_item(s, adv) for s, adv in zip(kept, self._advantages(kept, step))]
        counts = {"num_groups": float(len(groups)),
                  "num_groups_filtered": float(len(dropped)),
                  "zero_variance_share": len(flat) / len(groups) if groups else 0.0,
                  "num_samples_too_long": float(too_long)}
        return items, step, counts

    def train(self, samples: list[Sample], *,
              then_broadcast: str | None = None) -> dict[str, float]:
        """Optimizer steps over ``samples``: one, or ``config.minibatches`` over consecutive
        shares of them (whole groups where possible); the step's metrics.

        Without any trainable token (every group filtered, or no samples) nothing is updated
        and ``num_samples_trained`` is 0. ``then_broadcast``: after the last update, rank 0
        starts broadcasting the new weights over that weight-update group (opened with
        :meth:`open_weight_sync`); the group's engines must receive them before the next
        broadcast, which first checks that this one ended. The metric ``weight_staging_s``
        says what starting it took.
        """
        start = time.perf_counter()
        items, step, metrics = self._items(samples)
        trained_tokens = step.tokens
        metrics["num_samples"] = float(len(samples))
        if not items or trained_tokens == 0:
            return {**metrics, "num_samples_trained": 0.0, "update_skipped": 1.0,
                    "trained_tokens": 0.0, "tokens": 0.0,
                    "step_time": time.perf_counter() - start}
        shares = minibatch_shares(items, self.config.minibatches)
        if len(shares) > 1 and self.config.tis_cap is not None:
            before = _get_all([a.logprobs.remote(items) for a in self._scorers])[0]
            for item, logprobs in zip(items, before):
                item.trainer_logprobs = logprobs
        results: list[dict[str, float]] = []
        for index, share in enumerate(shares):
            share_step = StepInfo(sequences=len(share),
                                  tokens=float(sum(sum(item.loss_mask) for item in share)),
                                  max_response_len=step.max_response_len)
            ranks = split_for_data_parallel(share, self.dp)
            stage = then_broadcast if index == len(shares) - 1 else None
            results += _get_all([actor.train_step.remote(ranks[rank // self.tp], share_step,
                                                         index == 0, stage)
                                 for rank, actor in enumerate(self._actors)])
        replicas = [r for i, r in enumerate(results) if (i % len(self._actors)) % self.tp == 0]
        for key in _SHARES:  # each update's loss, averaged over the updates
            metrics[key] = sum(r.get(key, 0.0) for r in replicas) / len(shares)
        for key in _PER_TOKEN:
            metrics[key] = sum(r.get(key, 0.0) for r in replicas) / trained_tokens
        if self.config.tis_cap is not None:
            metrics["tis_ratio_mean"] = sum(r["tis_ratio"] for r in replicas) / trained_tokens
            metrics["tis_truncated"] = sum(r["tis_truncated"] for r in replicas) / trained_tokens
            metrics["tis_ratio_max"] = max(r["tis_ratio_max"] for r in replicas)
        last = results[-len(self._actors)]
        metrics["grad_norm"] = sum(r["grad_norm"] for r in results[:: len(self._actors)]) / len(
            shares)
        metrics["lr"] = last["lr"]
        metrics["update_skipped"] = float(all(r["update_skipped"] for r in results))
        if then_broadcast is not None:
            metrics["weight_staging_s"] = max(r["weight_staging_s"] for r in results[-len(
                self._actors):])
        tokens = float(sum(len(item.tokens) for item in items))
        step_time = time.perf_counter() - start
        metrics.update(num_samples_trained=float(len(items)), trained_tokens=trained_tokens,
                       tokens=tokens, step_time=step_time, tokens_per_s=tokens / step_time,
                       updates=float(len(shares)),
                       rank_step_time=max(r["step_time"] for r in results))
        return metrics

    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        """The current policy's logprobs of each sample's response tokens."""
        items = [_to_item(s) for s in samples]
        return _get_all([a.logprobs.remote(items) for a in self._scorers])[0]

    # In-memory weight sync: global rank 0 broadcasts to the engines (--weight-sync
    # distributed; rollyard.run.weight_push drives the engines' side).

    def weight_sync_address(self) -> tuple[str, int]:
        """Rank 0's node address and a free port there, for a weight-update rendezvous."""
        import ray

        return tuple(ray.get(self._actors[0].free_address.remote()))

    def weight_sync_backend(self) -> str:
        """``nccl`` when the ranks run on GPUs, else ``gloo``."""
        import ray

        return ray.get(self._actors[0].weight_sync_backend.remote())

    def weight_specs(self) -> list:
        """The :class:`rollyard.weight_transfer.TensorSpec` of every tensor a weight broadcast
        sends (Hugging Face names, the checkpoint's dtype), in order."""
        return _get_all([a.weight_sync_specs.remote() for a in self._actors])[0]

    def open_weight_sync(self, master_address: str, master_port: int, world_size: int,
                         group_name: str, backend: str, timeout_s: float,
                         buckets: list) -> None:
        """Rank 0 hosts the rendezvous and joins as rank 0; returns once all ``world_size``
        ranks joined, raises within about ``timeout_s`` otherwise. Each broadcast over the
        group sends ``buckets`` (lists of TensorSpecs, one broadcast each)."""
        _get_all([self._actors[0].open_weight_sync.remote(
            master_address, master_port, world_size, group_name, backend, timeout_s,
            buckets)])

    def broadcast_weights(self, group_name: str) -> None:
        """Broadcast the current policy over the group (as its buckets); after
        ``train(..., then_broadcast=group_name)``, wait for the broadcast it staged."""
        _get_all(self.start_broadcast(group_name))

    def start_broadcast(self, group_name: str) -> list[Any]:
        """:meth:`broadcast_weights` without waiting: the ranks' Ray object refs (awaitable
        in asyncio; :func:`rollyard.training.group.await_all` waits on them)."""
        return [a.broadcast_weights.remote(group_name) for a in self._actors]

    def close_weight_sync(self, group_name: str) -> None:
        """Leave the group (a broadcast staged for it fails)."""
        _get_all([a.close_weight_sync.remote(group_name) for a in self._actors])

    def export_hf(self, out_dir: str) -> str:
        """Write the current weights as a Hugging Face folder (config, safetensors, tokenizer)."""
        _get_all([actor.export_hf.remote(str(out_dir)) for actor in self._actors])
        return str(out_dir)

    def save_checkpoint(self, folder: str) -> None:
        """Every rank writes its model and optimizer shards, LR schedule and rng states into
        ``folder`` (on a shared filesystem when the ranks span machines)."""
        _get_all([actor.save_checkpoint.remote(str(folder)) for actor in self._actors])

    def load_checkpoint(self, folder: str) -> None:
        """Restore what :meth:`save_checkpoint` wrote, into ranks of the same layout."""
        _get_all([actor.load_checkpoint.remote(str(folder)) for actor in self._actors])

    def __enter__(self) -> TrainGroup:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.shutdown()

    def shutdown(self, graceful: bool = True) -> None:
        """Stop the ranks and release the placement group; safe to call twice. ``graceful``:
        each rank leaves its process group first; otherwise (an update abandoned at
        ``--stop-timeout``, which a rank would finish first) the ranks are killed at once."""
        import ray
        from ray.util.placement_group import remove_placement_group

        actors, self._actors = self._actors, []
        if actors:
            try:
                if graceful:
                    ray.get([actor.shutdown.remote() for actor in actors], timeout=30)
            except Exception:  # a dead rank must not stop the release of the others
                pass
            for actor in actors:
                ray.kill(actor)
        if getattr(self, "_pg", None) is not None:
            remove_placement_group(self._pg)
            self._pg = None
