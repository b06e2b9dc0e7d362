"""Rollout workers: Ray actors that run the selected rollout plugin in their own process.

A worker receives only plain data — plugin *names*, each plugin's options, the model folder and
the engine URLs — and resolves the plugins through entry points itself, exactly as the driver
does. Nothing the user wrote is pickled, so a plugin that works in ``rollyard plugins`` works
in a worker.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from rollyard.interfaces import RewardContext, RolloutContext
from rollyard.plugins import PluginManager
from rollyard.rewards import RewardSet
from rollyard.run.collect import CollectSettings, collect_step, placeholder
from rollyard.types import Sample, SampleStatus, SamplingParams, Task


@dataclass
class RolloutSpec:
    """Everything a worker needs, as picklable plain data."""

    rollout: str
    transport: str
    reward_weights: dict[str, float]
    options: dict[str, dict[str, Any]]  # plugin (entry-point) name -> its options
    model_dir: str
    engine_urls: list[str]
    sampling: SamplingParams
    settings: CollectSettings
    config: dict[str, Any] = field(default_factory=dict)
    seed: int = 0


class RolloutWorker:
    """One process running the rollout plugin; wrapped with ``ray.remote`` by the pool."""

    def __init__(self, spec: RolloutSpec, index: int) -> None:
        from transformers import AutoTokenizer

        manager = PluginManager()
        manager.load_for_run([("rollout", spec.rollout), ("transport", spec.transport)]
                             + [("reward", name) for name in spec.reward_weights])

        def options(kind: str, name: str) -> dict[str, Any]:
            return dict(spec.options.get(manager.owner(kind, name).name, {}))

        tokenizer = AutoTokenizer.from_pretrained(spec.model_dir)
        self.transport = manager.get("transport", spec.transport)(
            spec.engine_urls, options("transport", spec.transport))
        self.rewards = RewardSet(
            {name: manager.get("reward", name)(RewardContext(tokenizer, options("reward", name)))
             for name in spec.reward_weights}, spec.reward_weights)
        context = RolloutContext(
            config=spec.config, tokenizer=tokenizer, transport=self.transport,
            rewards=self.rewards, options=options("rollout", spec.rollout),
            rng=random.Random(f"{spec.seed}-{index}"), sampling=spec.sampling)
        self.rollout = manager.get("rollout", spec.rollout)(context)
        self.settings = spec.settings

    def tasks(self, split: str) -> list[Task]:
        return list(self.rollout.tasks(split))

    async def collect(self, tasks: list[Task]) -> tuple[list[Sample], dict[str, float]]:
        samples = await collect_step(self.rollout, self.rewards, tasks, self.settings)
        return samples, self.rollout.metrics()

    async def close(self) -> None:
        await self.transport.close()


class RolloutPool:
    """``count`` rollout workers; a step's tasks are dealt round-robin among them."""

    def __init__(self, spec: RolloutSpec, count: int) -> None:
        import ray

        remote = ray.remote(num_cpus=0, max_concurrency=64)(RolloutWorker)
        self.workers = [remote.remote(spec, i) for i in range(count)]
        self.group_size = spec.settings.group_size
        ray.get([w.__ray_ready__.remote() for w in self.workers])

    def tasks(self, split: str) -> list[Task]:
        import ray

        return ray.get(self.workers[0].tasks.remote(split))

    def collect(self, tasks: list[Task]) -> tuple[list[Sample], dict[str, float]]:
        """Samples of every task (a lost worker's tasks become failed samples) and the mean of
        the workers' environment metrics."""
        import ray

        shares = [tasks[i::len(self.workers)] for i in range(len(self.workers))]
        refs = [(share, w.collect.remote(share)) for w, share in zip(self.workers, shares)
                if share]
        samples: list[Sample] = []
        metrics: dict[str, list[float]] = {}
        for share, ref in refs:
            try:
                got, env_metrics = ray.get(ref)
            except ray.exceptions.RayError as exc:
                samples += [placeholder(task, SampleStatus.FAILED,
                                        f"rollout worker failed: {type(exc).__name__}: {exc}")
                            for task in share for _ in range(self.group_size)]
                continue
            samples += got
            for key, value in env_metrics.items():
                metrics.setdefault(key, []).append(value)
        return samples, {k: sum(v) / len(v) for k, v in metrics.items()}

    def close(self) -> None:
        import ray

        try:
            ray.get([w.close.remote() for w in self.workers], timeout=30)
        finally:
            for worker in self.workers:
                ray.kill(worker)
