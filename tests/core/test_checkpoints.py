"""Checkpoint folders are complete or absent: a save that fails or is killed half-way leaves the
previous checkpoint usable, and a resumed run is told in one line what was passed over. The
driver's own state (task cursor, rollout rng) round-trips; the JSONL logger cuts its files back
to the checkpoint's step."""

import errno
import json
import random
from pathlib import Path

import pytest
from rollyard import Rollout, RolloutContext, Task
from rollyard.errors import ConfigError
from rollyard.run.checkpoints import CheckpointError, CheckpointStore
from rollyard.run.faults import ENV as FAULT_ENV
from rollyard.run.resume import find_checkpoint
from rollyard.run.task_source import TaskCycle
from rollyard_plugins.loggers.jsonl import keep_rows_until


def writer(tag: str, fail: BaseException | None = None):
    """Writes a small checkpoint body; raises ``fail`` half-way when given."""

    def write(folder: Path) -> dict:
        (folder / "trainer").mkdir()
        (folder / "trainer" / "rank-00000.pt").write_bytes(tag.encode() * 100)
        if fail is not None:
            raise fail
        (folder / "hf").mkdir()
        (folder / "hf" / "config.json").write_text("{}")
        return {"tag": tag}

    return write


def test_a_save_is_complete_points_latest_at_it_and_replaces_the_previous(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(2, writer("two"))
    saved = store.save(4, writer("four"))
    assert saved.step == 4 and saved.state == {"tag": "four"}
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step-000004\n"
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest",
                                                                           "step-000004"]
    found, note = store.find()
    assert found.path == saved.path and note is None
    manifest = json.loads((saved.path / "checkpoint.json").read_text())
    assert manifest["files"]["trainer/rank-00000.pt"] == len("four") * 100


def test_a_failing_writer_keeps_the_previous_checkpoint_and_says_so(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(2, writer("two"))
    full = OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(CheckpointError) as failed:
        store.save(4, writer("four", fail=full))
    message = str(failed.value)
    assert "checkpoint of step 4 could not be written" in message
    assert "No space left on device" in message
    assert "previous checkpoint" in message and "step-000002 is kept" in message
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest",
                                                                           "step-000002"]
    assert store.find() == (store.find()[0], None) and store.find()[0].step == 2


def test_the_injected_full_disk_fault_fails_the_save_between_stages(tmp_path, monkeypatch):
    from rollyard.run.faults import fault_point

    store = CheckpointStore(tmp_path)
    store.save(1, writer("one"))
    monkeypatch.setenv(FAULT_ENV, "raise:save:written@2")
    with pytest.raises(CheckpointError, match="step-000001 is kept"):
        store.save(2, writer("two"), fault=lambda point: fault_point(point, 2))
    assert store.find()[0].step == 1


def test_a_half_written_checkpoint_is_passed_over_in_one_line(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(3, writer("three"))
    half = tmp_path / "checkpoints" / ".partial-step-000006"  # what a kill mid-save leaves
    (half / "trainer").mkdir(parents=True)
    found, note = store.find()
    assert found.step == 3
    assert note == ("checkpoints: .partial-step-000006 is half-written (the run stopped while "
                    "saving it); using step-000003")
    store.discard_partial()
    assert not half.exists() and store.find() == (found, None)


def test_a_checkpoint_with_a_truncated_file_is_not_used(tmp_path):
    store = CheckpointStore(tmp_path)
    store.save(3, writer("three"))
    damaged = tmp_path / "checkpoints" / "step-000005"  # say, a disk that lost data
    (damaged / "trainer").mkdir(parents=True)
    (damaged / "trainer" / "rank-00000.pt").write_bytes(b"cut")
    (damaged / "checkpoint.json").write_text(json.dumps(
        {"format": 1, "step": 5, "state": {}, "files": {"trainer/rank-00000.pt": 500}}))
    found, note = store.find()
    assert found.step == 3
    assert note == ("checkpoints: step-000005: trainer/rank-00000.pt is missing or truncated; "
                    "using step-000003")


def test_complete_but_not_yet_pointed_at_is_used(tmp_path, monkeypatch):
    """Killed after the rename, before ``latest`` moved: the newer complete folder wins."""
    from rollyard.run.faults import fault_point

    store = CheckpointStore(tmp_path)
    store.save(1, writer("one"))
    monkeypatch.setenv(FAULT_ENV, "raise:save:renamed@2")
    with pytest.raises(CheckpointError, match="itself is complete"):
        store.save(2, writer("two"), fault=lambda point: fault_point(point, 2))
    assert (tmp_path / "checkpoints" / "latest").read_text() == "step-000001\n"
    assert store.find()[0].step == 2


def test_resume_without_a_checkpoint_is_an_error_naming_the_folder(tmp_path):
    with pytest.raises(CheckpointError, match=r"no complete checkpoint in .*checkpoints"):
        find_checkpoint(tmp_path, steps=10)
    CheckpointStore(tmp_path).save(10, writer("ten"))
    with pytest.raises(ConfigError, match="checkpoint is at step 10 and --steps is 10"):
        find_checkpoint(tmp_path, steps=10)


def test_task_cycle_state_continues_the_same_sequence():
    straight = TaskCycle(7, random.Random(3))
    expected = [straight.take(3) for _ in range(6)]
    first = TaskCycle(7, random.Random(3))
    got = [first.take(3) for _ in range(2)]
    state = json.loads(json.dumps(first.state_dict()))  # it is saved as JSON
    second = TaskCycle(7, random.Random(99))
    second.load_state_dict(state)
    got += [second.take(3) for _ in range(4)]
    assert got == expected and second.drawn == 18
    with pytest.raises(ConfigError, match="over 7 training tasks, the rollout now has 8"):
        TaskCycle(8, random.Random(0)).load_state_dict(state)


class Plain(Rollout):
    """A rollout written before state_dict existed: it only uses context.rng."""

    name = "plain"

    def tasks(self, split):
        return [Task(id="t", prompt="p")]

    async def run_group(self, task, n):
        return []


def test_rollout_state_dict_restores_the_rng_by_default():
    rollout = Plain(RolloutContext({}, None, None, rng=random.Random(5)))
    rollout.context.rng.random()
    state = rollout.state_dict()
    expected = [rollout.context.rng.random() for _ in range(3)]
    resumed = Plain(RolloutContext({}, None, None, rng=random.Random(0)))
    resumed.load_state_dict(state)
    assert [resumed.context.rng.random() for _ in range(3)] == expected


def test_jsonl_rows_after_the_checkpoint_are_dropped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [json.dumps({"step": s, "reward/mean": s / 10}) for s in (1, 2, 3, 4)]
    path.write_text("\n".join(rows) + '\n{"step": 5, "rew')  # a line cut by a kill
    keep_rows_until(path, 2)
    assert path.read_text() == rows[0] + "\n" + rows[1] + "\n"
    keep_rows_until(path, 0)  # a new run starts empty
    assert path.read_text() == ""


@pytest.mark.parametrize("with_best_samples", [True, False])
def test_a_restore_puts_back_the_best_samples_and_takes_checkpoints_from_before_them(
        tmp_path, with_best_samples):
    import asyncio
    import pickle
    from types import SimpleNamespace

    from rollyard.run.best_replay import BestSamples
    from rollyard.run.run_state import RunCheckpoints
    from rollyard.run.signals import StopSignals
    from rollyard.types import Sample

    kept = Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[-0.5], reward=0.9,
                  task_id="a", group_id="a/0")

    def write(folder: Path) -> dict:
        (folder / "rollout.pkl").write_bytes(pickle.dumps([{"drawn": 3}]))
        if with_best_samples:  # a checkpoint from before --replay-best has no such file
            (folder / "best_samples.pkl").write_bytes(pickle.dumps({"a": kept}))
        return {"tasks": {"cursor": 7}, "weight_version": 0}

    checkpoint = CheckpointStore(tmp_path).save(1, write)
    pool = SimpleNamespace(load_state_dicts=lambda states: loaded.update(pool=states))
    tasks = SimpleNamespace(load_state_dict=lambda state: loaded.update(tasks=state))
    session = SimpleNamespace(best=BestSamples())
    loaded: dict = {}
    saves = RunCheckpoints(tmp_path, 0, StopSignals(), resumed=checkpoint)
    asyncio.run(saves.restore(session, pool, tasks, transport=None))
    assert loaded == {"pool": [{"drawn": 3}], "tasks": {"cursor": 7}}
    assert session.best.state_dict() == ({"a": kept} if with_best_samples else {})
