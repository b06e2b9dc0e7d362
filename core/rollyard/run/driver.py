"""``rollyard train``: the RL loop. Rollouts through the transport, rewards, a Megatron update on
Ray, and the new weights pushed to every engine, step after step."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
import traceback
from collections.abc import Awaitable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from rollyard.config import ConfigView, RunConfig
from rollyard.errors import ConfigError, TooManyFailures, describe_error, strip_ansi
from rollyard.models.cache import cached_tiny_model
from rollyard.options import options_data
from rollyard.plugin_options import table_of
from rollyard.plugins import PluginManager
from rollyard.run.best_replay import BestSamples, rescore_replayed
from rollyard.run.engines import EngineFleet
from rollyard.run.eval_split import EvalPlan, run_evaluation
from rollyard.run.group_draw import GroupDraw, draw_groups, resample_budget
from rollyard.run.metrics import environment_metrics, failure_reasons, sample_metrics
from rollyard.run.mix import EnvironmentPools, environment_config
from rollyard.run.phase_clock import ROLLOUT, TRAINER, PhaseClock
from rollyard.run.pipeline import RolloutPipeline
from rollyard.run.preflight import (
    TaskCounts,
    count_tasks,
    count_tasks_isolated,
    counts_of,
    run_splits,
)
from rollyard.run.ray_cluster import local_cluster_dir, start_ray, stop_ray
from rollyard.run.resume import check_checkpoint_model, find_checkpoint
from rollyard.run.rollout_backend import RolloutBackend
from rollyard.run.rollout_workers import RolloutPool, RolloutSpec
from rollyard.run.run_state import RolloutSnapshot, RunCheckpoints, take_snapshot
from rollyard.run.signals import RunStopped, StopNotSaved, StopSignals
from rollyard.run.staleness import VersionLog, drop_stale, staleness_metrics
from rollyard.run.task_source import TaskSource, make_source
from rollyard.run.warden import Warden
from rollyard.run.weight_push import make_weight_sync
from rollyard.seeding import derive_seed
from rollyard.types import Sample


def new_run_dir(config: RunConfig) -> Path:
    """Where a new run's folder goes (``--name``, else the rollout and the time)."""
    envs = "+".join(env.label for env in config.environments)
    name = config.name or f"{envs}-{datetime.now():%Y%m%d-%H%M%S}"
    return Path(config.runs_dir) / name


class PluginSelection:
    """The plugin classes a run selected, and each one's own options."""

    def __init__(self, config: RunConfig, manager: PluginManager) -> None:
        self.config, self.manager = config, manager
        self.rollout = manager.get("rollout", config.rollout_plugin)
        self.transport = manager.get("transport", config.transport)
        self.engine = None if config.engine_url else manager.get("engine", config.engine)
        self.algorithm = manager.get("algorithm", config.algorithm)
        self.reward_weights = config.reward_weights or self.rollout.reward_weights(
            self.options("rollout", config.rollout_plugin))
        self.rewards = {name: manager.get("reward", name) for name in self.reward_weights}
        if config.partial_rollouts and not getattr(self.transport,
                                                   "supports_partial_rollouts", False):
            raise ConfigError(f"--partial-rollouts: transport {config.transport!r} cannot abort "
                              "running generations for a weight update and give back what "
                              "they had; leave out --partial-rollouts")
        #: the Python of the rollout workers' isolated venv; None: the core's environment
        self.worker_python: str | None = None

    def place_workers(self) -> None:
        """Decide where the rollout workers run (``--rollout-env``), before anything starts:
        refuse a plugin whose requirements this environment does not meet, or build (find)
        its isolated venv."""
        from rollyard.isolation.placement import rollout_python

        others = [("transport", self.config.transport)] + [("reward", name)
                                                           for name in self.rewards]
        name = self.config.rollout_plugin
        self.worker_python = rollout_python(self.manager, name, self.config.rollout_env,
                                            others, _notice, self.options("rollout", name))

    def preflight(self, config: RunConfig, model_dir: Path) -> TaskCounts:
        """Build the rollout and count the tasks of the splits the run uses, where its workers
        will run (:mod:`rollyard.run.preflight`), after :meth:`place_workers` and before
        anything starts; a ConfigError when a split the run needs is empty."""
        splits = run_splits(config)
        if self.worker_python is None:
            counts = count_tasks(self.rollout, self.options("rollout", config.rollout_plugin),
                                 config, model_dir, splits)
        else:
            counts = count_tasks_isolated(self.worker_python,
                                          rollout_spec(config, self, model_dir, []), splits)
        if not counts.train:
            raise ConfigError(f"rollout {config.rollout_plugin!r} has no training tasks (its "
                              "tasks('train') is empty)")
        if counts.eval is not None:
            EvalPlan.of(config, counts.eval, f"--eval-interval {config.eval_interval}")
        return counts

    def options(self, kind: str, name: str) -> Any:
        return self.config.options_for(self.manager.get(kind, name),
                                       self.manager.owner(kind, name).name)

    def tables(self) -> set[str]:
        """The option tables of the selected plugins (what config.json keeps)."""
        selected = [("rollout", self.config.rollout_plugin), ("transport", self.config.transport)]
        selected += [("engine", self.config.engine)] if self.engine else []
        selected += [("reward", name) for name in self.rewards]
        selected += [("algorithm", self.config.algorithm)]
        return {table_of(self.manager.get(kind, name), self.manager.owner(kind, name).name)
                for kind, name in selected} | self.manager.observer_tables()

    def selected_config(self) -> RunConfig:
        """The config with the option tables of the selected plugins only."""
        return self.config.replace(plugin_options={
            table: values for table, values in self.config.plugin_options.items()
            if table in self.tables()})


class RunSelection:
    """The plugins of a run: each environment's :class:`PluginSelection` (built from
    :func:`~rollyard.run.mix.environment_config`), by label, and the run-wide transport,
    engine and algorithm (the same in all of them)."""

    def __init__(self, config: RunConfig, manager: PluginManager) -> None:
        self.config, self.manager = config, manager
        self.weights = {env.label: env.weight for env in config.environments}
        self.environments = {
            env.label: PluginSelection(environment_config(config, env, manager), manager)
            for env in config.environments}
        first = next(iter(self.environments.values()))
        self.transport, self.engine = first.transport, first.engine
        self.algorithm = first.algorithm

    def options(self, kind: str, name: str) -> Any:
        """The options of a run-wide plugin (transport, engine, algorithm)."""
        return self.config.options_for(self.manager.get(kind, name),
                                       self.manager.owner(kind, name).name)

    def place_workers(self) -> None:
        """:meth:`PluginSelection.place_workers` of every environment."""
        for selection in self.environments.values():
            selection.place_workers()

    def tables(self) -> set[str]:
        """The option tables of every selected plugin (what config.json keeps)."""
        return set().union(*(s.tables() for s in self.environments.values()))

    def selected_config(self) -> RunConfig:
        """The config with the option tables of the selected plugins only; each
        environment's selection keeps the tables of its own plugins."""
        tables = self.tables()
        selected = self.config.replace(plugin_options={
            table: values for table, values in self.config.plugin_options.items()
            if table in tables})
        for selection in self.environments.values():
            # a run of one environment: its selection's config is the run's
            selection.config = (selected if selection.config is self.config
                                else selection.selected_config())
        return selected

    def preflight(self, model_dir: Path) -> dict[str, TaskCounts]:
        """Each environment's :meth:`PluginSelection.preflight`, by label."""
        return {label: selection.preflight(selection.config, model_dir)
                for label, selection in self.environments.items()}

    def specs(self, model_dir: Path, urls: list[str]) -> dict[str, RolloutSpec]:
        """What each environment's rollout workers are built from, by label."""
        return {label: rollout_spec(selection.config, selection, model_dir, urls)
                for label, selection in self.environments.items()}

    def check_unused_options(self, defaults: Mapping[str, Any]) -> None:
        """A ConfigError for options set for a plugin this run does not use (``--dapo-clip-high``
        with ``--algorithm grpo``): they would be ignored silently."""
        used = self.tables()
        for table, values in self.config.plugin_options.items():
            default = defaults.get(table)
            if table in used or default is None or values == default:
                continue
            changed = sorted(k for k, v in options_data(values).items()
                             if options_data(default).get(k) != v)
            flags = ", ".join(f"--{table}-{name.replace('_', '-')}" for name in changed)
            raise ConfigError(f"{flags} set, but this run does not use {table!r} (it uses "
                              f"--algorithm {self.config.algorithm}, --rollout-plugin "
                              f"{self.config.rollout_plugin}, --engine {self.config.engine}, "
                              f"--transport {self.config.transport})")


def rollout_spec(config: RunConfig, selection: PluginSelection, model_dir: Path,
                 urls: list[str]) -> RolloutSpec:
    """What rollout workers are built from. Observers' tables stay in the driver: a worker
    loads only the plugins of the run, not every observer."""
    return RolloutSpec(config=config, reward_weights=selection.reward_weights,
                       model_dir=str(model_dir), engine_urls=urls,
                       python=selection.worker_python,
                       driver_tables=frozenset(selection.manager.observer_tables()))


def run_training(config: RunConfig, manager: PluginManager,
                 defaults: Mapping[str, Any] | None = None,
                 resume: str | Path | None = None) -> Path:
    """Run ``config.steps`` RL steps; returns the run folder. ``defaults`` (every table's
    options when none is given, :meth:`rollyard.train_flags.TrainFlags.default_options`) lets
    options set for unselected plugins be refused. ``resume``: a run folder whose newest
    checkpoint the run continues from (``config`` is its checked config).

    Raises :class:`rollyard.run.signals.RunStopped` when SIGINT or SIGTERM stopped the run
    (after saving a checkpoint)."""
    checkpoint, note = find_checkpoint(resume, config.steps) if resume else (None, None)
    selection = RunSelection(config, manager)
    if defaults is not None:
        selection.check_unused_options(defaults)
    selection.place_workers()
    config = selection.selected_config()
    model_dir = Path(config.model) if config.model else cached_tiny_model(config.seed)
    if not (model_dir / "config.json").exists():
        raise ConfigError(f"--model {str(model_dir)!r} has no config.json (a Hugging Face "
                          "model folder is expected; build one with `rollyard init-model DIR`)")
    # absolute: the workers of a cluster the run joins (--ray-address) have their own cwd
    model_dir = model_dir.resolve()
    if checkpoint is not None:
        check_checkpoint_model(checkpoint, model_dir)
    from rollyard.training import TrainConfig, TrainGroup, check_layout

    train_config = TrainConfig.from_run(
        config, options_data(selection.options("algorithm", config.algorithm)))
    sizes = {env.config.group_size for env in selection.environments.values()}
    if len(sizes) > 1 and config.train_dp > 1:
        raise ConfigError(f"--train-dp {config.train_dp} with environments of different group "
                          f"sizes {sorted(sizes)}: a step's sample count would change from "
                          "step to step; give them one group_size, or --train-dp 1")
    # a layout that cannot train (tp not dividing the heads, dp not dividing the batch) fails
    # here, before the preflight and Ray; the Ray cluster's CPUs are checked once it runs
    check_layout(str(model_dir), train_config, config.train_tp, config.train_dp,
                 ep=config.train_ep)
    counts = selection.preflight(model_dir)
    if config.rollout_backend == "remote":  # the env servers answer, with this token
        from rollyard.run.remote_backend import preflight

        preflight(config)
    make_source({label: c.train for label, c in counts.items()}, selection.weights,
                config.seed, config.groups_per_step)  # a mix that starves one is refused here
    if config.model_defaults == "pretrained" and not resume:  # checked input only
        from rollyard.models.origin import defaults_line

        _notice(defaults_line(config.to_data()))
    stop = StopSignals().__enter__()  # from here a signal stops the run in order
    warden = None  # ends what the run started if this process is killed
    try:
        warden = Warden()
        started_ray = start_ray(config.ray_address, config.num_cpus)
        cluster_dir = local_cluster_dir() if started_ray else None
        if cluster_dir is not None:  # its sockets and logs, if this process dies
            warden.remove_after(cluster_dir)
    except BaseException:
        stop.__exit__(None, None, None)
        if warden is not None:
            warden.close()
        raise
    stop.install()  # over the SIGTERM handler ray.init sets
    run_dir = Path(resume) if resume else new_run_dir(config)
    fresh = not run_dir.exists()  # a folder this run makes (never one that was there)
    status, error, session, kept = "failed", None, None, True
    try:
        # the run folder exists from here on; a failure before the first step removes it
        run_dir.mkdir(parents=True, exist_ok=True)
        if checkpoint is not None:
            _notice(f"resuming {run_dir} from {checkpoint.path.name}"
                    + (f" ({note})" if note else ""))
        config.save(run_dir / "config.json")
        manager.hooks.on_run_start(ConfigView(config), str(run_dir),
                                   resumed_step=checkpoint.step if checkpoint else 0)
        engine = (selection.engine(selection.options("engine", config.engine))
                  if selection.engine else None)
        with EngineFleet(engine, str(model_dir), config.num_engines,
                         list(config.engine_url) or None) as fleet:
            with ThreadPoolExecutor(max_workers=1) as launcher:
                # the engines start while the train group builds: both mostly wait on the
                # processes they start
                engines_up = launcher.submit(fleet.start)
                group = TrainGroup(model_dir=str(model_dir), config=train_config,
                                   tp=config.train_tp, dp=config.train_dp,
                                   ep=config.train_ep)
            try:
                engines_up.result()
                if checkpoint is not None:
                    group.load_checkpoint(str(checkpoint.trainer_dir.resolve()))
                session = RunSession(config, selection, run_dir, model_dir, fleet, group,
                                     RunCheckpoints(run_dir, config.save_interval, stop,
                                                    checkpoint), counts)
                asyncio.run(session.run())
            finally:
                group.shutdown()
        status = "completed"
    except RunStopped:
        status = "interrupted"
        raise
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        kept = not fresh or (session is not None and session.steps_done > 0)
        exc.add_note(keep_failure(run_dir, exc) if kept else
                     "the run failed before its first step, so no run folder is kept; "
                     "--debug prints the traceback")
        raise
    finally:
        stop.__exit__(None, None, None)
        manager.hooks.on_run_end(str(run_dir), status, error)
        if started_ray:
            stop_ray()
        warden.close()
        if status == "failed" and not kept:
            shutil.rmtree(run_dir, ignore_errors=True)
    return run_dir


#: The file of a run folder that holds the traceback of the error that stopped the run.
FAILURE_LOG = "log.txt"


def keep_failure(run_dir: Path, exc: BaseException) -> str:
    """Write the traceback of ``exc`` to the run folder's log; returns where it is, as the
    note the error line ends with. Ray's remote tracebacks lose their colour codes."""
    path = run_dir / FAILURE_LOG
    text = "".join(traceback.format_exception(exc))
    with path.open("a") as log:
        log.write(f"{datetime.now():%Y-%m-%d %H:%M:%S} run failed\n{strip_ansi(text)}\n")
    return f"traceback in {path}"


def _pool_counts(pool: RolloutPool, config: RunConfig) -> TaskCounts:
    return counts_of({split: pool.num_tasks(split) for split in run_splits(config)})


def eval_plans(selection: RunSelection, counts: Mapping[str, TaskCounts],
               config: RunConfig) -> dict[str, EvalPlan] | None:
    """Each environment's evaluation plan (``--eval-interval``), None when the run does not
    evaluate."""
    if not config.eval_interval:
        return None
    return {label: EvalPlan.of(selection.environments[label].config, counts[label].eval or 0,
                               f"--eval-interval {config.eval_interval}")
            for label in counts}


def mean_by_key(by_env: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Each environment's metrics as ``<key>/<env>``, and each key's mean over them."""
    metrics: dict[str, float] = {}
    keys = dict.fromkeys(key for values in by_env.values() for key in values)
    for key in keys:
        values = [env_metrics[key] for env_metrics in by_env.values() if key in env_metrics]
        metrics[key] = sum(values) / len(values)
        metrics.update({f"{key}/{label}": env_metrics[key]
                        for label, env_metrics in by_env.items() if key in env_metrics})
    return metrics


def _notice(line: str) -> None:
    """One line for the user, on stderr (the console logger owns stdout)."""
    from rich.console import Console

    Console(stderr=True, highlight=False).print(line, markup=False, soft_wrap=True)


@dataclass
class StepRollout:
    """One step's groups and what it took to draw them."""

    draw: GroupDraw
    seconds: float
    #: Engines found dead and relaunched before the rollout.
    restarted: int
    #: The groups of each environment the step trains on (``TaskSource.plan``).
    quotas: dict[str, int]


#: How often a step in progress looks whether a stop has passed ``--stop-timeout``.
OVERDUE_POLL_S = 0.1
T = TypeVar("T")


class StepAbandoned(Exception):
    """A stop passed ``--stop-timeout`` while the step waited for ``task``."""

    def __init__(self, task: asyncio.Future) -> None:
        super().__init__("the step in progress was abandoned")
        self.task = task


class RunSession:
    """One run's steps, inside the event loop: collect, observe, train, push weights, and save
    checkpoints (every ``--save-interval`` steps, at the end, on a signal or past
    ``--max-seconds``). With ``--async`` the rollouts run ahead of training
    (:mod:`rollyard.run.pipeline`)."""

    def __init__(self, config: RunConfig, selection: RunSelection, run_dir: Path,
                 model_dir: Path, fleet: EngineFleet, group: Any,
                 checkpoints: RunCheckpoints | None = None,
                 counts: Mapping[str, TaskCounts] | None = None) -> None:
        self.config, self.selection, self.run_dir = config, selection, run_dir
        #: each environment's task counts the preflight found; None: asked of the workers
        self.counts = counts
        #: steps this session finished (a failed run without any leaves no run folder)
        self.steps_done = 0
        self.model_dir, self.fleet, self.group = model_dir, fleet, group
        self.hooks = selection.manager.hooks
        self.weight_sync = make_weight_sync(config.weight_sync, run_dir, fleet, group,
                                            abort_running=config.partial_rollouts)
        self.checkpoints = checkpoints or RunCheckpoints(run_dir, config.save_interval,
                                                         StopSignals())
        self.clock = PhaseClock()
        #: Engine restarts and weight pushes, which may otherwise meet in async mode.
        self._engines = asyncio.Lock()
        self.versions = VersionLog()
        #: each training task's best sample so far (``--replay-best``)
        self.best = BestSamples()

    @property
    def ahead(self) -> int:
        """Steps the rollouts may run ahead of training (0: the synchronous loop)."""
        return self.config.max_staleness if self.config.async_rollout else 0

    @property
    def weight_version(self) -> int:
        """The weight version the engines serve (0: the initial model)."""
        return self.weight_sync.version

    @property
    def weights_dir(self) -> str | None:
        """The exported folder of the weights the engines serve, if there is one."""
        return self.weight_sync.current_weights_dir

    def rollout_specs(self) -> dict[str, RolloutSpec]:
        return self.selection.specs(self.model_dir, self.fleet.urls)

    def _backend(self, spec: RolloutSpec) -> RolloutBackend:
        """``--rollout-backend``: Ray actors of this run, or env servers over HTTP."""
        if self.config.rollout_backend == "remote":
            from rollyard.run.remote_backend import remote_backend

            return remote_backend(self.config, spec)
        return RolloutPool(spec, self.config.rollout_workers)

    async def start_pools(self) -> EnvironmentPools:
        """Every environment's rollout workers."""
        pools = {label: await asyncio.to_thread(self._backend, spec)
                 for label, spec in self.rollout_specs().items()}
        return EnvironmentPools(pools)

    async def run(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        config, sel = self.config, self.selection
        transport = sel.transport(self.fleet.urls, sel.options("transport", config.transport))
        pool = await self.start_pools()
        counts = self.counts or {label: await asyncio.to_thread(_pool_counts, p, config)
                                 for label, p in pool.pools.items()}
        tasks = make_source({label: c.train for label, c in counts.items()}, sel.weights,
                            config.seed, config.groups_per_step)
        plan = eval_plans(sel, counts, config)
        progress = Progress(TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), disable=not config.progress)
        saves = self.checkpoints
        pipeline: RolloutPipeline[StepRollout, RolloutSnapshot] | None = None
        done = saves.first_step - 1
        #: why the run stopped with a step unfinished (--stop-timeout), None: it did not
        abandoned: str | None = None
        try:
            await saves.restore(self, pool, tasks, transport)
            self.versions = VersionLog(self.weight_version)
            pipeline = RolloutPipeline(
                lambda step: self.rollout(step, pool, transport, tasks), saves.first_step,
                config.steps, self.ahead, lambda: take_snapshot(pool, tasks, self.best))
            if plan is not None and saves.first_step == 1:
                # the untrained model's score: the row of step 0 that later evals compare with
                untrained = await self.evaluate(plan, pool, 0)
                untrained.update({"time/elapsed_s": saves.elapsed(), "time/unix": time.time()})
                self.hooks.on_step_end(0, untrained)
            self.clock = PhaseClock()
            pipeline.start()
            before: RolloutSnapshot | None = None
            with progress:
                bar = progress.add_task("steps", total=config.steps, completed=done)
                for step in range(saves.first_step, config.steps + 1):
                    if saves.stop.requested:
                        break
                    try:
                        rollout = await self.unless_overdue(pipeline.take(step))
                    except StepAbandoned as late:
                        # nothing of the step was trained: keep the state before its rollout
                        before = await pipeline.snapshot_before(step)
                        late.task.cancel()
                        abandoned = (f"step {step} abandoned in its rollout at --stop-timeout "
                                     f"{config.stop_timeout:g}")
                        break
                    try:
                        metrics = await self.unless_overdue(self.step(step, rollout,
                                                                      transport))
                    except StepAbandoned as late:
                        late.task.cancel()
                        # the update cannot be stopped otherwise, nor its thread end
                        await asyncio.to_thread(self.group.shutdown, False)
                        if done > saves.saved_step:
                            raise StopNotSaved(
                                saves.stop.signum or 0, done,
                                f"the update of step {step} was still running at "
                                f"--stop-timeout {config.stop_timeout:g}",
                                *self._newest()) from None
                        abandoned = (f"step {step} abandoned in its update at --stop-timeout "
                                     f"{config.stop_timeout:g}")
                        break
                    out_of_time = bool(config.max_seconds) and step < config.steps \
                        and saves.seconds_here() >= config.max_seconds
                    if plan is not None and not saves.stop.requested and (
                            step % config.eval_interval == 0 or step == config.steps
                            or out_of_time):
                        metrics.update(await self.evaluate(plan, pool, step))
                    metrics.update(self.clock.report())
                    metrics["time/elapsed_s"] = saves.elapsed()
                    metrics["time/unix"] = time.time()
                    metrics["time/checkpoint_s"] = saves.take_seconds()
                    self.hooks.on_step_end(step, metrics)
                    self.steps_done += 1
                    progress.advance(bar)
                    done = step
                    if saves.due(step):
                        await saves.save(step, self, pool, tasks,
                                         await pipeline.snapshot_before(step + 1))
                    pipeline.trained(step)
                    if out_of_time:
                        break
            if abandoned is None:
                before = await pipeline.snapshot_before(done + 1)
            await pipeline.close()  # a rollout that ran ahead is dropped
            await self.finish(done, pool, tasks, before, abandoned)
        except (RunStopped, StopNotSaved):
            raise
        except Exception as exc:
            signum = saves.stop.signum
            if signum is None:
                raise
            raise StopNotSaved(signum, done, describe_error(exc), *self._newest()) from exc
        finally:
            if pipeline is not None:
                await pipeline.close()
            with contextlib.suppress(Exception):  # a save still running ends first
                await saves.settle()
            # an abandoned rollout still waits on the workers: killing them ends it
            await asyncio.to_thread(pool.close, abandoned is None)
            await self.weight_sync.close(transport)
            await transport.close()

    def _newest(self) -> tuple[Path | None, int]:
        """The newest complete checkpoint and its step."""
        last = self.checkpoints.last
        return (last.path, last.step) if last else (None, 0)

    async def unless_overdue(self, awaitable: Awaitable[T]) -> T:
        """What ``awaitable`` gives, unless a stop was asked for more than ``--stop-timeout``
        seconds ago first: then :class:`StepAbandoned`, its task still running."""
        task = asyncio.ensure_future(awaitable)
        stop, timeout = self.checkpoints.stop, self.config.stop_timeout
        while True:
            finished, _ = await asyncio.wait({task}, timeout=OVERDUE_POLL_S)
            if finished:
                return task.result()
            if stop.overdue(timeout):
                raise StepAbandoned(task)

    async def finish(self, done: int, pool: EnvironmentPools, tasks: TaskSource,
                     before: RolloutSnapshot | None = None,
                     abandoned: str | None = None) -> None:
        """Save the last finished step unless it is saved (``before``: the state before a
        dropped rollout began); say why the run stopped early (``abandoned``: the step that a
        stop left unfinished)."""
        saves = self.checkpoints
        if done > saves.saved_step:
            await saves.save(done, self, pool, tasks, before)
        await saves.settle()
        if saves.stop.signum is not None:
            raise RunStopped(saves.stop.signum, done, saves.last.path if saves.last else None,
                             self.run_dir, abandoned)
        if done < self.config.steps:
            where = saves.last.path if saves.last else "no checkpoint"
            _notice(f"stopped after step {done}: --max-seconds {self.config.max_seconds:g} "
                    f"reached; checkpoint {where} (continue with: rollyard train --resume "
                    f"{self.run_dir})")

    async def rollout(self, step: int, pool: EnvironmentPools, transport: Any,
                      tasks: TaskSource) -> StepRollout:
        """Relaunch dead engines, then draw the groups of ``step``."""
        with self.clock.busy(ROLLOUT):
            started = time.perf_counter()
            async with self._engines:
                restarted = await self.weight_sync.restart_dead(transport)
            self.checkpoints.fault("rollout", step)
            quotas = tasks.plan(self.config.groups_per_step)
            draw = await self.collect(pool, tasks, step, quotas)
            return StepRollout(draw, time.perf_counter() - started, len(restarted), quotas)

    async def step(self, step: int, rollout: StepRollout, transport: Any) -> dict[str, float]:
        """Check, observe and train on the rollout of ``step``; push the new weights."""
        config, draw = self.config, rollout.draw
        samples = draw.samples
        metrics = sample_metrics(samples)
        metrics.update(environment_metrics(samples))
        metrics.update(draw.worker_metrics)
        metrics.update(draw.metrics())
        metrics["engines/restarted"] = float(rollout.restarted)
        self.hooks.on_samples(step, samples)
        bad = metrics["samples/failed_rate"] + metrics["samples/aborted_rate"]
        if bad > config.failure_threshold:
            raise TooManyFailures(
                f"step {step}: {bad:.0%} of samples failed or aborted (threshold "
                f"{config.failure_threshold:.0%}); most common: "
                + "; ".join(failure_reasons(samples)))
        if self.ahead:
            draw.samples, dropped = drop_stale(samples, self.versions, self.ahead)
        trained = [s for s in draw.training_samples(
            rollout.quotas, signal_only=self.group.filters_zero_variance) if s.usable]
        if self.ahead:
            metrics.update(staleness_metrics(trained, self.versions, self.ahead, dropped))
        await self.checkpoints.settle()  # the trainer's part of a checkpoint is written
        await asyncio.to_thread(rescore_replayed, trained, self.group.logprobs)
        self.checkpoints.fault("train", step)
        with self.clock.busy(TRAINER):
            train_started = time.perf_counter()
            train_metrics = await asyncio.to_thread(self.group.train, trained,
                                                    **self.weight_sync.train_options())
            # staging the weights for the push is the weight sync's time, not the update's
            staging_s = train_metrics.pop("weight_staging_s", 0.0)
            if staging_s:
                metrics["time/weight_staging_s"] = staging_s
            metrics["time/train_s"] = time.perf_counter() - train_started - staging_s
            metrics.update({f"train/{k}": v for k, v in train_metrics.items()})
            sync_started = time.perf_counter()
            if train_metrics.get("num_samples_trained", 0) > 0:
                metrics["engines/restarted"] += await self.push_weights(transport, step)
            metrics["time/weight_sync_s"] = time.perf_counter() - sync_started + staging_s
        metrics.update({"time/rollout_s": rollout.seconds,
                        "weight_version": float(self.weight_version),
                        "perf/tokens_per_s": metrics["response/tokens"] / rollout.seconds})
        return metrics

    async def evaluate(self, plans: Mapping[str, EvalPlan], pool: EnvironmentPools,
                       step: int) -> dict[str, float]:
        """Evaluate the weights of ``step`` on each environment's eval split
        (``--eval-interval``); with several, each one's ``eval/<key>/<env>`` and, as
        ``eval/<key>``, their mean."""
        started = time.perf_counter()
        by_env = {}
        for label, plan in plans.items():
            async def on_pool(indices: list[int], seeds: list[int], label: str = label):
                return await asyncio.to_thread(pool.evaluate, label, indices, seeds)

            by_env[label] = await run_evaluation(plan, on_pool, self.config.seed, step)
        metrics = next(iter(by_env.values())) if len(by_env) == 1 else mean_by_key(by_env)
        metrics["time/eval_s"] = time.perf_counter() - started
        return metrics

    async def collect(self, pool: EnvironmentPools, tasks: TaskSource, step: int,
                      quotas: Mapping[str, int]) -> GroupDraw:
        """One step's groups, ``quotas[env]`` of each environment, an environment's groups
        drawn again while too few carry a learning signal. Each group's sampling seed comes
        from the run's seed, the step and the group's draw index."""
        config = self.config

        async def draw(wanted: Mapping[str, int],
                       ) -> tuple[list[Sample], dict[str, float], list[Sample]]:
            shares = {}
            for label, count in wanted.items():
                first = tasks.drawn
                shares[label] = (tasks.take(label, count),
                                 [derive_seed(config.seed, step, first + i)
                                  for i in range(count)])
            samples, metrics = await asyncio.to_thread(pool.collect, shares, step)
            replayed = self.best.replays(samples) if config.replay_best else []
            return samples, metrics, replayed

        return await draw_groups(draw, quotas,
                                 resample_budget(config.groups_per_step,
                                                 config.max_resample_factor),
                                 refill=self.group.filters_zero_variance)

    async def push_weights(self, transport: Any, step: int) -> int:
        """Make every engine serve the policy as weight version ``step`` (``--weight-sync``,
        :mod:`rollyard.run.weight_push`); returns how many dead engines were relaunched on
        the way."""
        async with self._engines:
            restarted = await self.weight_sync.push(transport, step)
        self.versions.pushed(step)
        return restarted
