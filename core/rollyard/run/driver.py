"""``rollyard train``: the RL loop. Rollouts through the transport, rewards, a Megatron update on
Ray, and the new weights pushed to every engine, step after step."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from rollyard.errors import ConfigError, TooManyFailures, TransportError
from rollyard.options import DEST_SEPARATOR, plugin_options
from rollyard.plugins import PluginManager
from rollyard.run.collect import CollectSettings
from rollyard.run.engines import EngineFleet
from rollyard.run.metrics import failure_reasons, sample_metrics
from rollyard.run.rollout_workers import RolloutPool, RolloutSpec
from rollyard.types import SamplingParams, Task


def resolved_config(args: argparse.Namespace) -> dict[str, Any]:
    """The run's options as plain data: core keys at top level, plugin options in tables."""
    config: dict[str, Any] = {}
    for key, value in sorted(vars(args).items()):
        if key in ("handler", "command"):
            continue
        plugin, sep, option = key.partition(DEST_SEPARATOR)
        if sep:
            config.setdefault(plugin, {})[option] = value
        else:
            config[key] = value
    return config


def default_model_dir(runs_dir: Path, seed: int) -> Path:
    """The tiny model of the default run, built once and reused."""
    from rollyard.models.tiny import build_tiny_model

    target = runs_dir / ".models" / f"tiny-qwen3-seed{seed}"
    if not (target / "config.json").exists():
        build_tiny_model(target, arch="qwen3", size="tiny", seed=seed)
    return target


def make_run_dir(args: argparse.Namespace) -> Path:
    name = args.name or f"{args.rollout_plugin}-{datetime.now():%Y%m%d-%H%M%S}"
    run_dir = Path(args.runs_dir) / name
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def start_ray(args: argparse.Namespace) -> bool:
    """Start (or join) Ray; returns whether this run started it and must shut it down."""
    import ray

    if ray.is_initialized():
        return False
    if args.ray_address:
        ray.init(address=args.ray_address, include_dashboard=False)
    else:
        ray.init(num_cpus=args.num_cpus, object_store_memory=256 * 1024**2,
                 include_dashboard=False, log_to_driver=False)
    return True


class TaskCycle:
    """Endless shuffled passes over a split's tasks."""

    def __init__(self, tasks: list[Task], rng: random.Random) -> None:
        if not tasks:
            raise ConfigError("the rollout plugin has no training tasks")
        self.tasks, self.rng, self.queue = tasks, rng, []

    def take(self, n: int) -> list[Task]:
        out = []
        while len(out) < n:
            if not self.queue:
                self.queue = list(self.tasks)
                self.rng.shuffle(self.queue)
            out.append(self.queue.pop())
        return out


class PluginSelection:
    """The plugin classes a run selected, and each one's own options."""

    def __init__(self, args: argparse.Namespace, manager: PluginManager) -> None:
        self.args, self.manager = args, manager
        self.rollout = manager.get("rollout", args.rollout_plugin)
        self.transport = manager.get("transport", args.transport)
        self.engine = None if args.engine_url else manager.get("engine", args.engine)
        self.reward_weights = dict(args.reward or self.rollout.reward_weights(
            self.options("rollout", args.rollout_plugin)))
        self.rewards = {name: manager.get("reward", name) for name in self.reward_weights}

    def options(self, kind: str, name: str) -> dict[str, Any]:
        return plugin_options(self.args, self.manager.owner(kind, name).name)


def run_training(args: argparse.Namespace, manager: PluginManager) -> Path:
    """Run ``args.steps`` RL steps; returns the run folder."""
    selection = PluginSelection(args, manager)
    run_dir = make_run_dir(args)
    config = resolved_config(args)
    (run_dir / "config.json").write_text(json.dumps(config, indent=2, default=str))
    model_dir = Path(args.model) if args.model else default_model_dir(Path(args.runs_dir),
                                                                       args.seed)
    if not (model_dir / "config.json").exists():
        raise ConfigError(f"--model {str(model_dir)!r} has no config.json (a Hugging Face "
                          "model folder is expected; build one with `rollyard init-model DIR`)")

    from rollyard.training import TrainConfig, TrainGroup

    train_config = TrainConfig(
        lr=args.lr, clip_eps=args.clip_eps, kl_coef=args.kl_coef,
        entropy_coef=args.entropy_coef, micro_batch_size=args.micro_batch_size,
        temperature=args.temperature, filter_zero_variance=not args.keep_zero_variance_groups,
        seed=args.seed, global_batch_size=args.groups_per_step * args.group_size)
    started_ray = start_ray(args)
    status, error = "failed", None
    manager.hooks.on_run_start(config, str(run_dir))
    try:
        engine = (selection.engine(selection.options("engine", args.engine))
                  if selection.engine else None)
        group = TrainGroup(model_dir=str(model_dir), config=train_config, tp=args.train_tp,
                           dp=args.train_dp)
        try:
            with EngineFleet(engine, str(model_dir), args.num_engines, args.engine_url) as fleet:
                fleet.start()
                session = RunSession(args, selection, run_dir, model_dir, fleet, group)
                asyncio.run(session.run())
        finally:
            group.shutdown()
        status = "completed"
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        manager.hooks.on_run_end(str(run_dir), status, error)
        if started_ray:
            import ray

            ray.shutdown()
    return run_dir


class RunSession:
    """One run's steps, inside the event loop: collect, observe, train, push weights."""

    def __init__(self, args: argparse.Namespace, selection: PluginSelection, run_dir: Path,
                 model_dir: Path, fleet: EngineFleet, group: Any) -> None:
        self.args, self.selection, self.run_dir = args, selection, run_dir
        self.model_dir, self.fleet, self.group = model_dir, fleet, group
        self.hooks = selection.manager.hooks
        self.weights_dir: str | None = None
        self.weight_version = 0

    def rollout_spec(self) -> RolloutSpec:
        args, config = self.args, resolved_config(self.args)
        return RolloutSpec(
            rollout=args.rollout_plugin, transport=args.transport,
            reward_weights=self.selection.reward_weights,
            options={k: v for k, v in config.items() if isinstance(v, dict)},
            model_dir=str(self.model_dir), engine_urls=self.fleet.urls,
            sampling=SamplingParams(max_new_tokens=args.max_new_tokens,
                                    temperature=args.temperature, top_p=args.top_p,
                                    top_k=args.top_k),
            settings=CollectSettings(args.group_size, args.max_concurrent_groups,
                                     args.rollout_timeout),
            config=config, seed=args.seed)

    async def run(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        args, sel = self.args, self.selection
        transport = sel.transport(self.fleet.urls, sel.options("transport", args.transport))
        pool = await asyncio.to_thread(RolloutPool, self.rollout_spec(), args.rollout_workers)
        tasks = TaskCycle(await asyncio.to_thread(pool.tasks, "train"), random.Random(args.seed))
        progress = Progress(TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), disable=args.no_progress)
        try:
            with progress:
                bar = progress.add_task("steps", total=args.steps)
                for step in range(1, args.steps + 1):
                    metrics = await self.step(step, pool, transport, tasks)
                    self.hooks.on_step_end(step, metrics)
                    progress.advance(bar)
        finally:
            await asyncio.to_thread(pool.close)
            await transport.close()

    async def step(self, step: int, pool: RolloutPool, transport: Any,
                   tasks: TaskCycle) -> dict[str, float]:
        args = self.args
        started = time.perf_counter()
        restarted = await self.fleet.restart_dead(transport, self.weights_dir,
                                                  self.weight_version)
        samples, env_metrics = await asyncio.to_thread(pool.collect,
                                                       tasks.take(args.groups_per_step))
        rollout_s = time.perf_counter() - started
        metrics = sample_metrics(samples)
        metrics.update({f"env/{k}": v for k, v in env_metrics.items()})
        metrics["engines/restarted"] = float(len(restarted))
        self.hooks.on_samples(step, samples)
        bad = metrics["samples/failed_rate"] + metrics["samples/aborted_rate"]
        if bad > args.failure_threshold:
            raise TooManyFailures(
                f"step {step}: {bad:.0%} of samples failed or aborted (threshold "
                f"{args.failure_threshold:.0%}); most common: "
                + "; ".join(failure_reasons(samples)))
        usable = [s for s in samples if s.usable]
        train_metrics = await asyncio.to_thread(self.group.train, usable)
        metrics.update({f"train/{k}": v for k, v in train_metrics.items()})
        if train_metrics.get("num_samples_trained", 0) > 0:
            self.weights_dir, restarted_now = await self.push_weights(transport, step)
            self.weight_version = step
            metrics["engines/restarted"] += restarted_now
        metrics.update({"time/step_s": time.perf_counter() - started, "time/rollout_s": rollout_s,
                        "weight_version": float(self.weight_version),
                        "perf/tokens_per_s": metrics["response/tokens"] / rollout_s})
        return metrics

    async def push_weights(self, transport: Any, step: int) -> tuple[str, int]:
        """Export the policy and make every engine serve it as weight version ``step``.
        Returns the weights folder and how many dead engines were relaunched on the way."""
        target = self.run_dir / "weights" / f"step-{step:05d}"
        await asyncio.to_thread(self.group.export_hf, str(target))
        try:
            await transport.update_weights(str(target.resolve()), step)
        except TransportError:
            # an engine that died is relaunched and loads these weights; a live engine that
            # refused them is a real error
            restarted = await self.fleet.restart_dead(transport, str(target.resolve()), step)
            if not restarted:
                raise
        else:
            restarted = []
        for old in sorted((self.run_dir / "weights").glob("step-*"))[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        return str(target.resolve()), len(restarted)
