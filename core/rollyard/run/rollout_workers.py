"""Rollout workers: Ray actors that run the selected rollout plugin in their own process.

A worker receives only plain data — plugin *names*, the run's config as ``RunConfig.to_data()``
with each plugin's options, the model folder and the engine URLs
(:meth:`RolloutSpec.to_data`) — resolves the plugins through entry points itself, exactly as
the driver does, and decodes the config once (:meth:`RolloutSpec.from_data`). Nothing the
user wrote is pickled, so a plugin that works in ``rollyard plugins`` works in a worker.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rollyard.config import ConfigView, RunConfig, parse_resource
from rollyard.errors import ConfigError, PluginError, RollyardError, describe_error
from rollyard.interfaces import RewardContext, RolloutContext
from rollyard.model_facts import model_max_tokens
from rollyard.plugins import PluginManager
from rollyard.rewards import RewardSet
from rollyard.run.collect import CollectSettings, collect_step, placeholder, with_text
from rollyard.run.faults import stall_point
from rollyard.run.partial_rollouts import ResumingTransport
from rollyard.seeding import derive_seed
from rollyard.types import Sample, SampleStatus, SamplingParams, Task


@dataclass(frozen=True)
class RolloutSpec:
    """Everything a rollout worker is built from: the typed config of its environment, and
    the plain data that crosses to a worker's process (:meth:`to_data`), decoded there once
    by :meth:`from_data`."""

    config: RunConfig
    reward_weights: dict[str, float]
    model_dir: str
    engine_urls: list[str]
    python: str | None = None  # an isolated venv's interpreter (docs/isolation.md)
    #: option tables that stay in the driver (the observers': a worker loads only the
    #: plugins of the run)
    driver_tables: frozenset[str] = frozenset()

    def plugins(self) -> list[tuple[str, str]]:
        """(kind, name) of every plugin a worker loads."""
        return self.config.wanted_plugins() + [("reward", name) for name in self.reward_weights]

    def to_data(self) -> dict[str, Any]:
        """The spec as JSON data: the config as ``RunConfig.to_data()`` (without the driver's
        tables) and the plugins that decode it."""
        config = {key: value for key, value in self.config.to_data().items()
                  if key not in self.driver_tables}
        return {"config": config, "plugins": [list(p) for p in self.plugins()],
                "reward_weights": dict(self.reward_weights), "model_dir": self.model_dir,
                "engine_urls": list(self.engine_urls), "python": self.python}

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> tuple[PluginManager, RolloutSpec]:
        """The plugins of :meth:`to_data`'s data loaded by entry point in this process (all of
        them for data without its ``plugins``), and the spec with its config decoded by
        :meth:`RunConfig.from_data <rollyard.config.RunConfig.from_data>`, the one decoder of
        a run's config."""
        manager = PluginManager()
        if data.get("plugins") is None:
            manager.load_all()
        else:
            manager.load_for_run([(kind, name) for kind, name in data["plugins"]])
        config = RunConfig.from_data(data["config"], manager.option_tables(),
                                     "the run's config")
        return manager, cls(config, dict(data["reward_weights"]), str(data["model_dir"]),
                            list(data["engine_urls"]), data.get("python"))


def load_run(spec: RolloutSpec | Mapping[str, Any]) -> tuple[PluginManager, RolloutSpec]:
    """The plugins of a spec loaded by entry point in this process, and the spec typed: the
    data of another process decoded (:meth:`RolloutSpec.from_data`), a spec of this one as
    it is."""
    if isinstance(spec, RolloutSpec):
        manager = PluginManager()
        manager.load_for_run(spec.plugins())
        return manager, spec
    return RolloutSpec.from_data(spec)


class RolloutWorker:
    """One process running the rollout plugin; wrapped with ``ray.remote`` by the pool.

    The worker lists the tasks itself (a rollout's task order is deterministic), so the driver
    sends task indices, never tasks.
    """

    def __init__(self, spec: RolloutSpec | Mapping[str, Any], index: int) -> None:
        """``spec``: a RolloutSpec in this process, its :meth:`~RolloutSpec.to_data` from
        another (a Ray actor's arguments, an env server's session)."""
        from transformers import AutoTokenizer

        manager, spec = load_run(spec)
        config = spec.config

        def options(kind: str, name: str) -> Any:
            return config.options_for(manager.get(kind, name), manager.owner(kind, name).name)

        tokenizer = AutoTokenizer.from_pretrained(spec.model_dir)
        self.config, self.index, self.tokenizer = config, index, tokenizer
        self.model_dir = spec.model_dir
        self.rollout_cls = manager.get("rollout", config.rollout_plugin)
        self.rollout_options = options("rollout", config.rollout_plugin)
        self.transport = manager.get("transport", config.transport)(
            spec.engine_urls, options("transport", config.transport))
        if config.partial_rollouts:
            self.transport = ResumingTransport(self.transport)
        self.rewards = RewardSet(
            {name: manager.get("reward", name)(RewardContext(tokenizer, options("reward", name)))
             for name in spec.reward_weights}, spec.reward_weights)
        self.max_tokens = model_max_tokens(spec.model_dir)
        self.rollout = self._rollout(random.Random(f"{config.seed}-{index}"),
                                     run_sampling(config))
        self._eval_rollout: Any = None
        self.settings = CollectSettings(config.group_size, config.max_concurrent_groups,
                                        config.rollout_timeout, max_tokens=self.max_tokens)
        self._tasks: dict[str, list[Task]] = {}

    def _rollout(self, rng: random.Random, sampling: SamplingParams) -> Any:
        context = RolloutContext(
            config=ConfigView(self.config), tokenizer=self.tokenizer, transport=self.transport,
            options=self.rollout_options, rng=rng, sampling=sampling,
            context_length=self.max_tokens, model_dir=self.model_dir)
        return self.rollout_cls(context)

    def tasks(self, split: str) -> list[Task]:
        if split not in self._tasks:
            self._tasks[split] = list(self.rollout.tasks(split))
        return self._tasks[split]

    def num_tasks(self, split: str) -> int:
        return len(self.tasks(split))

    async def collect(self, indices: list[int], seeds: list[int | None] | None = None,
                      step: int = 0) -> tuple[list[Sample], dict[str, float]]:
        """One group per task index; ``seeds`` are the groups' sampling seeds, ``step`` the
        run's step (for :mod:`rollyard.run.faults`). The metrics are the environment's, as
        ``env/<name>``, and with ``--partial-rollouts`` ``rollout/resumed_rate``: the share of
        generations a weight update aborted and that went on from where they stopped."""
        await stall_point("rollout", step)
        tasks = [self.tasks("train")[i] for i in indices]
        samples = await collect_step(self.rollout, self.rewards, tasks, self.settings, seeds)
        metrics = {f"env/{k}": v for k, v in {**self.rollout.metrics(),
                                              **self.rewards.metrics()}.items()}
        if isinstance(self.transport, ResumingTransport):
            generations, resumed = self.transport.take_counts()
            metrics["rollout/resumed_rate"] = resumed / generations if generations else 0.0
        return with_text(samples, self.tokenizer), metrics

    async def evaluate(self, indices: list[int], seeds: list[int | None],
                       ) -> tuple[list[Sample], list[bool], dict[str, float]]:
        """``--eval-samples`` episodes of each eval task index, through a rollout instance of
        its own (``--eval-temperature``; its rng seeded from ``seeds`` at every evaluation, so
        that an evaluation depends on the run's seed and step only, across a resume too): the
        training rollout's state is not touched. Returns the samples, whether each solved its
        task, and the metrics."""
        if self._eval_rollout is None:
            config = self.config
            self._eval_rollout = self._rollout(
                random.Random(), replace(run_sampling(config),
                                         temperature=config.eval_temperature))
        rollout = self._eval_rollout
        rollout.context.rng.seed(derive_seed("eval-rng", *seeds))
        tasks = [self.tasks("eval")[i] for i in indices]
        settings = replace(self.settings, group_size=self.config.eval_samples)
        samples = await collect_step(rollout, self.rewards, tasks, settings, seeds)
        by_id = {task.id: task for task in tasks}
        solved = [s.usable and s.task_id in by_id and self._solved(rollout, s, by_id[s.task_id])
                  for s in samples]
        return samples, solved, {**rollout.metrics(), **self.rewards.metrics()}

    @staticmethod
    def _solved(rollout: Any, sample: Sample, task: Task) -> bool:
        try:
            return bool(rollout.solved(sample, task))
        except Exception as exc:
            raise PluginError(f"rollout {rollout.name!r}: solved() raised "
                              f"{type(exc).__name__}: {exc} (task {task.id!r})") from exc

    def state_dict(self) -> Any:
        """The rollout's :meth:`~rollyard.Rollout.state_dict`, checked at the boundary."""
        try:
            return self.rollout.state_dict()
        except Exception as exc:
            raise PluginError(f"rollout {self.rollout.name!r}: state_dict() raised "
                              f"{type(exc).__name__}: {exc}") from exc

    def load_state_dict(self, state: Any) -> None:
        try:
            self.rollout.load_state_dict(state)
        except Exception as exc:
            raise PluginError(f"rollout {self.rollout.name!r}: load_state_dict() raised "
                              f"{type(exc).__name__}: {exc} (while resuming from a "
                              "checkpoint)") from exc

    async def close(self) -> None:
        await self.rewards.close()
        await self.transport.close()


def _get(refs: list[Any]) -> list[Any]:
    """``ray.get``, raising a worker's own RollyardError instead of Ray's wrapper."""
    import ray
    from ray.exceptions import RayTaskError

    try:
        return ray.get(refs)
    except RayTaskError as exc:
        if isinstance(exc.cause, RollyardError):
            raise exc.cause from None
        raise


def worker_resources(requested: Any) -> dict[str, float]:
    """``--rollout-resources`` as Ray's ``resources``; a ConfigError, before any worker is
    placed, when no node of the cluster has that much of one (Ray would wait forever)."""
    import ray

    wanted = dict(parse_resource(text) for text in requested)
    if not wanted:
        return {}
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    for name, amount in wanted.items():
        if not any(node.get(name, 0.0) >= amount for node in nodes):
            most = max((node.get(name, 0.0) for node in nodes), default=0.0)
            custom = sorted({key for node in nodes for key in node
                             if key not in ("CPU", "GPU", "memory", "object_store_memory")
                             and not key.startswith("node:")})
            raise ConfigError(f"--rollout-resources {name}={amount:g}: no node of the Ray "
                              f"cluster has that much (most on one node: {most:g}; custom "
                              f"resources there: {', '.join(custom) or 'none'})")
    return wanted


def run_sampling(config: RunConfig) -> SamplingParams:
    """The sampling parameters of a run's rollouts."""
    return SamplingParams(max_new_tokens=config.max_new_tokens,
                          temperature=config.temperature, top_p=config.top_p,
                          top_k=config.top_k)


class RolloutPool:
    """The Ray :class:`~rollyard.run.rollout_backend.RolloutBackend`: ``count`` rollout
    workers; a step's tasks are dealt round-robin among them. A worker that dies is started
    again; the tasks it held become failed samples."""

    def __init__(self, spec: RolloutSpec, count: int) -> None:
        import ray

        resources = worker_resources(spec.config.rollout_resources)
        remote = ray.remote(num_cpus=0, max_concurrency=64, resources=resources or None)(
            RolloutWorker)
        # an isolated plugin's workers run on its venv's interpreter (docs/isolation.md)
        self._remote = (remote.options(runtime_env={"py_executable": spec.python})
                        if spec.python else remote)
        self.spec, self._data = spec, spec.to_data()  # what each worker decodes
        self.workers = [self._remote.remote(self._data, i) for i in range(count)]
        self.config = spec.config
        self.group_size = spec.config.group_size
        #: closing: a worker lost now is not started again
        self.closing = False
        ray.get([w.__ray_ready__.remote() for w in self.workers])

    def _restart(self, index: int) -> None:
        """Replace a dead worker with a new one built from the same spec."""
        import ray

        ray.kill(self.workers[index])
        self.workers[index] = self._remote.remote(self._data, index)
        ray.get(self.workers[index].__ray_ready__.remote())

    def num_tasks(self, split: str) -> int:
        import ray

        return ray.get(self.workers[0].num_tasks.remote(split))

    def collect(self, tasks: list[int], seeds: list[int | None] | None = None,
                step: int = 0) -> tuple[list[Sample], dict[str, float]]:
        """Samples of every task (a lost worker's tasks become failed samples) and the mean of
        the workers' metrics (:meth:`RolloutWorker.collect`). ``seeds``: each group's sampling
        seed; ``step``: the run's step."""
        samples, _, metrics = self._deal("collect", "train", self.group_size, tasks, seeds,
                                         (step,))
        return samples, metrics

    def evaluate(self, tasks: list[int], seeds: list[int | None],
                 ) -> tuple[list[Sample], list[bool], dict[str, float]]:
        """:meth:`RolloutWorker.evaluate` of eval task indices, dealt among the workers."""
        return self._deal("evaluate", "eval", self.config.eval_samples, tasks, seeds)

    def _deal(self, method: str, split: str, group_size: int, tasks: list[int],
              seeds: list[int | None] | None, extra: tuple[Any, ...] = (),
              ) -> tuple[list[Sample], list[bool], dict[str, float]]:
        """Run ``method`` of the workers on round-robin shares of ``tasks`` (and ``extra``
        arguments): the samples, the solved flags (evaluation only; empty for collect) and the
        mean of their metrics."""
        import ray

        count = len(self.workers)
        seeds = list(seeds) if seeds is not None else [None] * len(tasks)
        shares = [tasks[i::count] for i in range(count)]
        refs = [(i, share, getattr(w, method).remote(share, seeds[i::count], *extra))
                for i, (w, share) in enumerate(zip(self.workers, shares)) if share]
        samples: list[Sample] = []
        solved: list[bool] = []
        metrics: dict[str, list[float]] = {}
        for index, share, ref in refs:
            try:
                got, *got_solved, worker_metrics = ray.get(ref)
            except ray.exceptions.RayError as exc:
                if isinstance(exc, ray.exceptions.RayActorError) and not self.closing:
                    self._restart(index)
                lost = [placeholder(Task(id=f"{split}[{task}]", prompt=""), SampleStatus.FAILED,
                                    f"rollout worker failed: {describe_error(exc)}")
                        for task in share for _ in range(group_size)]
                samples += lost
                solved += [False] * len(lost)
                continue
            samples += got
            solved += got_solved[0] if got_solved else []
            for key, value in worker_metrics.items():
                metrics.setdefault(key, []).append(value)
        return samples, solved, {k: sum(v) / len(v) for k, v in metrics.items()}

    def state_dicts(self) -> list[Any]:
        """Every worker's rollout state, in worker order (saved with a checkpoint)."""
        return _get([w.state_dict.remote() for w in self.workers])

    def load_state_dicts(self, states: list[Any]) -> None:
        if len(states) != len(self.workers):
            raise ConfigError(f"the checkpoint holds the state of {len(states)} rollout "
                              f"workers, this run has {len(self.workers)}")
        _get([w.load_state_dict.remote(s) for w, s in zip(self.workers, states)])

    def close(self, graceful: bool = True) -> None:
        """End the workers: each closes its plugins first when ``graceful``; otherwise (a step
        abandoned) they are killed at once, and a rollout still waiting on them ends."""
        import ray

        self.closing = True
        try:
            if graceful:
                ray.get([w.close.remote() for w in self.workers], timeout=30)
        finally:
            for worker in self.workers:
                ray.kill(worker)
