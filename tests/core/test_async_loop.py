"""The run loop with --async: the staleness bound under a slow rollout and a slow trainer,
dropped stale groups, the task order, phase timings and checkpoints taken while a rollout runs
ahead; and a stop that meets a step going past --stop-timeout, or a trainer that dies. The loop
(RunSession, its pipeline and weight sync) is real; the rollout workers, the engine and the
trainer around it are in-process stand-ins that sleep where the real ones compute, and record
what they were given."""

from __future__ import annotations

import asyncio
import pickle
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from rollyard.config import RunConfig
from rollyard.errors import ConfigError
from rollyard.run import driver
from rollyard.run.driver import RunSession
from rollyard.run.engines import EngineFleet
from rollyard.run.phase_clock import ROLLOUT, TRAINER, PhaseClock
from rollyard.run.run_state import RunCheckpoints
from rollyard.run.signals import RunStopped, StopNotSaved, StopSignals
from rollyard.run.staleness import VersionLog
from rollyard.testing.fakes import SCRIPTED_URL, ScriptedTransport
from rollyard.types import Sample


class Engine(ScriptedTransport):
    """The engine the loop pushes weights to; ``frozen``: it never applies them."""

    def __init__(self, frozen: bool = False) -> None:
        super().__init__()
        self.frozen = frozen

    async def update_weights(self, model_dir: str, weight_version: int) -> None:
        if not self.frozen:
            self.weight_version = weight_version


class Workers:
    """Rollout workers: each sample takes ``delay`` s and records the version the engine
    serves when it is generated; rewards alternate between 0 and 1, 2 or 3 (by the groups
    drawn before), so every group has a signal and a task's groups differ in their best."""

    def __init__(self, engine: Engine, delay: float, tasks: int = 1000,
                 stall: Stall | None = None) -> None:
        self.engine, self.delay, self.tasks = engine, delay, tasks
        self.collected: list[list[int]] = []
        self.drawn = 0  # the rollout plugin's own state: tasks it ran
        self.stall = stall

    def __call__(self, spec: object, count: int) -> Workers:  # stands for RolloutPool(...)
        self.group_size = spec.config["group_size"]
        return self

    def num_tasks(self, split: str) -> int:
        return self.tasks

    def collect(self, tasks: list[int], seeds: list, step: int = 0,
                ) -> tuple[list[Sample], dict]:
        if self.stall is not None:
            try:
                self.stall.point("rollout", step)
            except Killed:  # the pool's lost workers give nothing
                return [], {}
        self.collected.append(list(tasks))
        samples = []
        for task in tasks:
            for i in range(self.group_size):
                time.sleep(self.delay)
                samples.append(Sample(tokens=[1, 2, 3], prompt_len=2, loss_mask=[1],
                                      logprobs=[-0.5],
                                      reward=float(i % 2 * (1 + self.drawn % 3)),
                                      task_id=f"t{task}", group_id=f"g{task}",
                                      weight_version=self.engine.weight_version))
            self.drawn += 1
        return samples, {}

    def state_dicts(self) -> list:
        return [{"drawn": self.drawn}]

    def load_state_dicts(self, states: list) -> None:
        self.drawn = states[0]["drawn"]

    def close(self, graceful: bool = True) -> None:
        if not graceful and self.stall is not None:  # killed: a stalled rollout ends
            self.stall.killed.set()


class Stall:
    """A step that takes "minutes" at ``where`` (``rollout`` or ``train``) of ``step``: the run
    is signalled as it begins, and it ends only when its workers or ranks are killed; or, with
    ``fail``, the ranks die there after the signal; ``hold=False``: only the signal."""

    def __init__(self, where: str, step: int, stop: StopSignals, fail: bool = False,
                 hold: bool = True) -> None:
        self.where, self.step, self.stop, self.fail, self.hold = where, step, stop, fail, hold
        self.killed = threading.Event()

    def point(self, where: str, step: int) -> None:
        if (where, step) != (self.where, self.step):
            return
        self.stop.signum, self.stop.at = 15, time.monotonic()  # SIGTERM, now
        if self.fail:
            raise RuntimeError("the rank's process died")
        if self.hold:
            assert self.killed.wait(30), "the stalled step was never abandoned"
            raise Killed(where)


class Killed(Exception):
    """What a killed worker's or rank's call gives its caller."""


class Trainer:
    """The train group: each update takes ``delay`` s; records the policy version it held
    (the last step it trained) and the versions of the samples it was given."""

    filters_zero_variance = False

    def __init__(self, delay: float, stall: Stall | None = None) -> None:
        self.delay, self.stall = delay, stall
        self.version = 0
        self.seen: list[tuple[int, list[int]]] = []
        self.trained: list[list[Sample]] = []

    def logprobs(self, samples: list[Sample]) -> list[list[float]]:
        return [[-0.25] * s.response_len for s in samples]

    def train(self, samples: list[Sample]) -> dict[str, float]:
        if self.stall is not None:
            self.stall.point("train", self.version + 1)
        self.seen.append((self.version, [s.weight_version for s in samples]))
        self.trained.append(samples)
        time.sleep(self.delay)
        self.version += 1
        return {"num_samples_trained": float(len(samples))}

    def export_hf(self, target: str) -> None:
        Path(target).mkdir(parents=True, exist_ok=True)
        (Path(target) / "config.json").write_text("{}")
        (Path(target) / "model.safetensors").write_text("weights")

    def save_checkpoint(self, target: str) -> None:
        Path(target).mkdir(parents=True, exist_ok=True)
        (Path(target) / "state").write_text(str(self.version))

    def shutdown(self, graceful: bool = True) -> None:
        if not graceful and self.stall is not None:  # killed: a stalled update ends
            self.stall.killed.set()


def run_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, rollout_delay: float = 0.0,
             train_delay: float = 0.0, frozen: bool = False, save_interval: int = 0,
             stop_after: float | None = None, tasks: int = 1000,
             stall: tuple[str, int] | None = None, fail: bool = False, hold: bool = True,
             outcome: list[Exception] | None = None, **options: object,
             ) -> tuple[list[dict], Trainer, Workers, dict[int, tuple[dict, list, dict]]]:
    """Run the real loop over the stand-ins; returns each step's metrics, the trainer, the
    workers and every checkpoint's (driver state, rollout states, best samples). ``stall``:
    (where, step) of a :class:`Stall` (``fail``: the ranks die there instead); ``outcome``
    receives how a signalled run ended."""
    engine = Engine(frozen)
    stop = StopSignals()
    stalled = Stall(*stall, stop, fail, hold) if stall else None
    workers = Workers(engine, rollout_delay, tasks, stalled)
    trainer = Trainer(train_delay, stalled)
    monkeypatch.setattr(driver, "RolloutPool", workers)
    config = RunConfig(weight_sync="disk", groups_per_step=2, group_size=4,
                       keep_zero_variance_groups=True, progress=False, **options)
    rows: list[dict] = []
    hooks = SimpleNamespace(on_samples=lambda step, samples: None,
                            on_step_end=lambda step, metrics: rows.append(metrics))
    manager = SimpleNamespace(hooks=hooks, observers=dict)  # no observer plugins
    spec = SimpleNamespace(config=config.to_data())  # what the stand-in workers read
    selection = SimpleNamespace(manager=manager, weights={"toy": 1.0},
                                environments={"toy": SimpleNamespace(config=config)},
                                specs=lambda model_dir, urls: {"toy": spec},
                                transport=lambda urls, options: engine,
                                options=lambda kind, name: None)
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True)
    saves = RunCheckpoints(run_dir, save_interval, stop)
    saved: dict[int, tuple[dict, list, dict]] = {}
    store_save = saves.store.save

    def recording_save(step, write, fault=lambda point: None):
        checkpoint = store_save(step, write, fault)
        saved[step] = (checkpoint.state, pickle.loads(checkpoint.rollout_file.read_bytes()),
                       pickle.loads(checkpoint.best_samples_file.read_bytes()))
        return checkpoint

    saves.store.save = recording_save
    if stop_after is not None:  # a signal arrives while the loop runs
        threading.Timer(stop_after, lambda: setattr(saves.stop, "signum", 15)).start()
    fleet = EngineFleet(None, str(tmp_path), 1, [SCRIPTED_URL])
    session = RunSession(config, selection, run_dir, tmp_path, fleet, trainer, saves)
    try:
        asyncio.run(session.run())
    except (RunStopped, StopNotSaved) as exc:
        if outcome is None and not isinstance(exc, RunStopped):
            raise
        (outcome if outcome is not None else []).append(exc)
    return rows, trainer, workers, saved


def staleness(trainer: Trainer) -> list[int]:
    """How far behind the trainer's policy each trained sample was, in updates (every step
    trains and pushes, so versions are consecutive)."""
    return [held - version for held, versions in trainer.seen for version in versions]


def test_the_bound_holds_under_a_slow_rollout(tmp_path, monkeypatch):
    # a rollout takes 8 x 10 ms, an update 30 ms: the weights change during each rollout
    rows, trainer, _, _ = run_loop(tmp_path, monkeypatch, rollout_delay=0.01,
                                   train_delay=0.03, steps=6, async_rollout=True,
                                   max_staleness=1)
    ages = staleness(trainer)
    assert len(trainer.seen) == 6 and max(ages) <= 1 and min(ages) >= 0
    assert 0 in ages[8:] and 1 in ages  # the rollouts ran ahead, on weights pushed meanwhile
    assert all(row["async/dropped_stale"] == 0 for row in rows)
    assert sum(row["async/staleness_1"] for row in rows) == ages.count(1)


@pytest.mark.parametrize("bound", [1, 2])
def test_the_bound_holds_under_a_slow_trainer(tmp_path, monkeypatch, bound):
    # an update takes 150 ms, a rollout 8 x 5 ms
    rows, trainer, _, _ = run_loop(tmp_path, monkeypatch, rollout_delay=0.005,
                                   train_delay=0.15, steps=6, async_rollout=True,
                                   max_staleness=bound)
    ages = staleness(trainer)
    assert len(trainer.seen) == 6 and max(ages) == bound  # ran ahead as far as allowed
    assert [row["async/staleness_max"] for row in rows][bound:] == [float(bound)] * (6 - bound)
    # the rollout of the next step ran while the trainer worked
    assert sum(row["time/overlap_s"] for row in rows) > 0.1


def test_sync_mode_trains_only_fresh_samples_without_overlap(tmp_path, monkeypatch):
    rows, trainer, _, _ = run_loop(tmp_path, monkeypatch, train_delay=0.05, steps=3)
    assert set(staleness(trainer)) == {0}
    assert all(row["time/overlap_s"] == 0 for row in rows)
    for row in rows:
        assert row["time/idle_rollout_s"] >= row["time/train_s"]
        assert row["time/idle_trainer_s"] >= row["time/rollout_s"]
        assert "async/staleness_0" not in row


def test_groups_too_far_behind_are_dropped_and_counted(tmp_path, monkeypatch):
    # an engine that never applies the pushed weights: every sample stays at version 0
    rows, trainer, _, _ = run_loop(tmp_path, monkeypatch, frozen=True, steps=4,
                                   async_rollout=True, max_staleness=1)
    assert [row["async/dropped_stale"] for row in rows] == [0, 0, 8, 8]
    assert [len(versions) for _, versions in trainer.seen] == [8, 8, 0, 0]
    assert max(staleness(trainer)) <= 1


def test_async_draws_the_same_tasks_as_sync(tmp_path, monkeypatch):
    *_, sync_workers, _ = run_loop(tmp_path / "sync", monkeypatch, steps=4)
    *_, async_workers, _ = run_loop(tmp_path / "async", monkeypatch, steps=4,
                                    async_rollout=True)
    assert async_workers.collected == sync_workers.collected


def test_a_checkpoint_leaves_out_the_rollout_running_ahead(tmp_path, monkeypatch):
    rows, _, workers, saved = run_loop(
        tmp_path, monkeypatch, train_delay=0.1, steps=50, save_interval=2, stop_after=0.5,
        async_rollout=True)
    done = len(rows)
    assert 2 < done < 50 and sorted(saved)[-1] == done
    assert workers.drawn > done * 2  # the rollout of the next step had drawn its tasks
    for step, (state, rollout_states, _) in saved.items():
        assert state["tasks"]["drawn"] == step * 2 == rollout_states[0]["drawn"]
        assert state["weight_version"] == step


def test_replayed_best_samples_are_rescored_and_checkpointed_without_the_rollout_ahead(
        tmp_path, monkeypatch):
    rows, trainer, workers, saved = run_loop(
        tmp_path, monkeypatch, train_delay=0.05, steps=8, save_interval=1, tasks=3,
        async_rollout=True)
    assert sum(row["rollout/replayed"] for row in rows) > 0
    replayed = [s for step in trainer.trained for s in step if s.logprobs == [-0.25]]
    assert len(replayed) == sum(row["rollout/replayed"] for row in rows)  # all rescored
    # each checkpoint holds the best of the groups of its steps, not of the step whose
    # rollout ran ahead while it was taken (the trainer is the slow side here)
    best: dict[str, float] = {}
    groups = [task for call in workers.collected for task in call]
    for step in range(1, 9):
        for index in range(2 * (step - 1), 2 * step):
            best[f"t{groups[index]}"] = max(best.get(f"t{groups[index]}", 0.0),
                                            1.0 + index % 3)
        assert {task: s.reward for task, s in saved[step][2].items()} == best


def test_version_log_counts_updates_not_version_numbers():
    log = VersionLog(0)
    for version in (1, 2, 5):  # steps 3 and 4 trained nothing
        log.pushed(version)
    assert [log.behind(v) for v in (0, 1, 2, 3, 5)] == [3, 2, 1, 1, 0]


def test_phase_clock_sums_overlap_and_idle_time():
    now = [0.0]
    clock = PhaseClock(lambda: now[0])
    with clock.busy(ROLLOUT):  # rollout 0..3, trainer 1..2 then 4..6: a step of 6 s
        now[0] = 1.0
        with clock.busy(TRAINER):
            now[0] = 2.0
        now[0] = 3.0
    now[0] = 4.0
    with clock.busy(TRAINER):
        now[0] = 6.0
    rollout = clock.busy(ROLLOUT)
    rollout.__enter__()  # still running at the report: counted up to it, then the rest
    now[0] = 7.0
    assert clock.report() == {"time/step_s": 7.0, "time/overlap_s": 1.0,
                              "time/idle_rollout_s": 3.0, "time/idle_trainer_s": 4.0}
    now[0] = 8.0
    rollout.__exit__(None, None, None)
    assert clock.report() == {"time/step_s": 1.0, "time/overlap_s": 0.0,
                              "time/idle_rollout_s": 0.0, "time/idle_trainer_s": 1.0}


def test_async_with_a_staleness_bound_of_zero_is_refused():
    with pytest.raises(ConfigError, match="--max-staleness 0 with --async"):
        RunConfig(async_rollout=True, max_staleness=0)
    assert RunConfig(max_staleness=0).max_staleness == 0  # sync mode takes any bound


def test_a_rollout_past_the_stop_timeout_is_dropped_and_the_step_before_saved(
        tmp_path, monkeypatch):
    outcome: list[Exception] = []
    rows, trainer, workers, saved = run_loop(
        tmp_path, monkeypatch, steps=5, stall=("rollout", 3), stop_timeout=0.3,
        outcome=outcome)
    assert len(rows) == 2 and len(trainer.seen) == 2 and len(workers.collected) == 2
    [stopped] = outcome
    assert isinstance(stopped, RunStopped) and stopped.exit_code == 143
    assert str(stopped).startswith("stopped by SIGTERM after step 2 (step 3 abandoned in its "
                                   "rollout at --stop-timeout 0.3); checkpoint ")
    # the state before the abandoned rollout: two steps of two tasks, version 2
    state, rollout_states, _ = saved[2]
    assert sorted(saved) == [2]
    assert state["tasks"]["drawn"] == 4 == rollout_states[0]["drawn"]
    assert state["weight_version"] == 2


def test_an_update_past_the_stop_timeout_is_abandoned_when_the_step_before_is_saved(
        tmp_path, monkeypatch):
    outcome: list[Exception] = []
    rows, _, _, saved = run_loop(
        tmp_path, monkeypatch, steps=5, stall=("train", 3), stop_timeout=0.3,
        save_interval=1, outcome=outcome)
    [stopped] = outcome
    assert isinstance(stopped, RunStopped)
    assert "after step 2 (step 3 abandoned in its update at --stop-timeout 0.3)" in str(stopped)
    assert sorted(saved) == [1, 2] and len(rows) == 2


def test_an_update_past_the_stop_timeout_with_the_step_before_unsaved_says_so(
        tmp_path, monkeypatch):
    outcome: list[Exception] = []
    run_loop(tmp_path, monkeypatch, steps=5, stall=("train", 3), stop_timeout=0.3,
             outcome=outcome)
    [failed] = outcome
    assert isinstance(failed, StopNotSaved)
    assert str(failed) == ("stopped by SIGTERM, but step 2 could not be saved: the update of "
                           "step 3 was still running at --stop-timeout 0.3; the run has no "
                           "checkpoint")


def test_a_trainer_that_dies_after_a_signal_is_a_stop_that_says_it_could_not_save(
        tmp_path, monkeypatch):
    outcome: list[Exception] = []
    _, _, _, saved = run_loop(tmp_path, monkeypatch, steps=5, stall=("train", 3), fail=True,
                              save_interval=1, outcome=outcome)
    [failed] = outcome
    assert isinstance(failed, StopNotSaved) and not saved.get(3)
    assert str(failed) == ("stopped by SIGTERM after step 2, then the run failed: "
                           "RuntimeError: the rank's process died; checkpoint "
                           f"{tmp_path}/run/checkpoints/step-000002 holds step 2")


def test_a_stop_whose_save_meets_a_full_disk_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLYARD_FAULT", "raise:save:trainer@2")
    outcome: list[Exception] = []
    run_loop(tmp_path, monkeypatch, steps=5, stall=("train", 2), hold=False, outcome=outcome)
    [failed] = outcome
    assert isinstance(failed, StopNotSaved)
    assert str(failed).startswith("stopped by SIGTERM, but step 2 could not be saved: ")
    assert "No space left on device" in str(failed)
    assert str(failed).endswith("; the run has no checkpoint")
