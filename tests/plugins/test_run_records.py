"""The standard loggers' records of a run, on real samples and metrics built by the core's own
code: the console line, samples.jsonl rows and --log-samples-every, the TensorBoard observer
read back with TensorBoard's EventAccumulator, the metric docs, and `rollyard report` on bad
input (the report of real runs is in tests/e2e/test_checkpoint_resume.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from rollyard import cli
from rollyard.config import ConfigView, RunConfig
from rollyard.plugins import PluginManager
from rollyard.run.collect import with_text
from rollyard.run.eval_split import eval_metrics
from rollyard.run.group_draw import GroupDraw
from rollyard.run.metrics import sample_metrics
from rollyard.types import Sample, SampleStatus
from rollyard_plugins.loggers.console import step_line
from rollyard_plugins.loggers.jsonl import JsonlLogger
from rollyard_plugins.loggers.tensorboard import TensorBoardLogger, TensorBoardOptions


class Tokenizer:
    """Decodes ids as letters (a..z): enough to see which ids went where."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(ord("a") + i % 26) for i in ids)


def samples() -> list[Sample]:
    done = Sample(tokens=[0, 1, 2, 3], prompt_len=2, loss_mask=[1, 1], logprobs=[-0.5, -0.1],
                  reward=1.5, rewards={"exact-match": 1.0, "char-f1": 0.5}, task_id="copy-1",
                  group_id="copy-1/g", weight_version=3, metadata={"completion": "cd"})
    lost = Sample.lost("copy-2", "copy-2/g", SampleStatus.FAILED, "reward raised KeyError",
                       [0, 1])
    return with_text([done, lost], Tokenizer())


def test_a_skipped_step_says_skipped_and_never_nan():
    metrics = {**sample_metrics(samples()), "train/num_samples_trained": 0.0,
               "train/update_skipped": 1.0, "time/step_s": 0.5, "perf/tokens_per_s": 4.0}
    line = step_line(3, metrics)
    assert "skipped: all groups had equal rewards" in line and "nan" not in line.lower()
    assert "nan" not in step_line(1, {}).lower()  # a step without any value
    trained = step_line(4, {**metrics, "train/num_samples_trained": 2.0, "train/loss": -0.25})
    assert "loss -0.2500" in trained and "skipped" not in trained
    before = step_line(0, {"eval/reward": 0.06, "eval/pass@1": 0.06, "time/eval_s": 9.0})
    assert before == "step   0  before training  eval 0.060 pass@1 0.06"


def test_samples_jsonl_rows_hold_text_outcome_and_version(tmp_path):
    logger = JsonlLogger()
    logger.on_run_start(RunConfig(log_samples_every=2).to_data(), str(tmp_path), 0)
    for step in (1, 2, 3, 4):
        logger.on_samples(step, samples())
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [2, 2, 4, 4]  # every 2nd step only
    done, lost = rows[:2]
    assert (done["prompt_text"], done["response_text"]) == ("ab", "cd")
    assert done["rewards"] == {"exact-match": 1.0, "char-f1": 0.5} and done["reward"] == 1.5
    assert (done["status"], done["failure"], done["weight_version"]) == ("completed", None, 3)
    assert done["completion"] == "cd" and done["replayed_from_version"] is None
    assert (lost["status"], lost["failure"]) == ("failed", "reward raised KeyError")
    # the text and the marks are not repeated under their metadata keys
    assert done["metadata"] == {} and lost["metadata"] == {}


def test_samples_jsonl_writes_dataclasses_in_the_metadata_as_objects(tmp_path):
    @dataclasses.dataclass
    class Verdict:
        passed: int
        where: Path

    logger = JsonlLogger()
    logger.on_run_start(RunConfig().to_data(), str(tmp_path), 0)
    sample = samples()[0]
    sample.metadata["verdict"] = Verdict(2, Path("/tmp/x"))
    logger.on_samples(1, [sample])
    row = json.loads((tmp_path / "samples.jsonl").read_text())
    assert row["metadata"]["verdict"] == {"passed": 2, "where": "/tmp/x"}
    assert row["tokens"] == [0, 1, 2, 3] and row["loss_mask"] == [1, 1]


def test_no_samples_are_logged_with_zero(tmp_path):
    logger = JsonlLogger()
    logger.on_run_start(RunConfig(log_samples_every=0).to_data(), str(tmp_path), 0)
    logger.on_samples(1, samples())
    assert (tmp_path / "samples.jsonl").read_text() == ""


def test_the_metric_docs_list_what_the_core_metric_code_writes(documented_metric):
    batch = samples()
    keys = {*sample_metrics(batch), *GroupDraw(batch, {}).metrics(),
            *eval_metrics(batch, [True, False], 3, {"verifiers/turns": 2.0}),
            "env/codegolf/timeout"}
    assert [key for key in sorted(keys) if not documented_metric(key)] == []
    assert not documented_metric("samples/made_up") and not documented_metric("eval")


def test_the_tensorboard_observer_is_a_plugin_with_its_own_options(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    manager = PluginManager(environ={})
    manager.load_all()
    assert "tensorboard" in manager.observers()
    logger = TensorBoardLogger()
    # the typed view the core hands observers: the options arrive decoded
    options = TensorBoardOptions(enabled=True, samples=1)
    config = ConfigView(RunConfig(plugin_options={"tensorboard": options}))
    logger.on_run_start(config, str(tmp_path), 0)
    assert logger.options is options
    for step in (1, 2):
        logger.on_samples(step, samples())
        logger.on_step_end(step, {"reward/mean": 0.5 * step, "time/unix": 1e9})
    logger.on_run_end(str(tmp_path), "completed", None)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["reward/mean", "time/unix"]
    assert [(e.step, e.value) for e in events.Scalars("reward/mean")] == [(1, 0.5), (2, 1.0)]
    table = events.Tensors("samples")[0].tensor_proto.string_val[0].decode()
    assert table.splitlines()[2] == "| copy-1 | completed | 1.500 | ab | cd |"
    assert len(table.splitlines()) == 3  # --tensorboard-samples 1


def test_tensorboard_is_off_unless_asked(tmp_path):
    logger = TensorBoardLogger()
    logger.on_run_start(ConfigView(RunConfig()), str(tmp_path), 0)
    logger.on_step_end(1, {"reward/mean": 1.0})
    assert not (tmp_path / "tensorboard").exists()


@pytest.fixture
def report(monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")

    def run(*argv: str) -> tuple[int, str]:
        status = cli.main(["report", *argv])
        return status, " ".join(capsys.readouterr().err.split())

    return run


def test_report_refuses_a_folder_that_is_not_a_run(report, tmp_path):
    (tmp_path / "models").mkdir()
    status, err = report(str(tmp_path / "models"))
    assert status == 1
    assert f"'{tmp_path / 'models'}' is not a run folder (it has no metrics.jsonl" in err
    status, err = report(str(tmp_path / "nowhere"))
    assert status == 1 and f"'{tmp_path / 'nowhere'}': no such folder" in err
    empty = tmp_path / "fresh"
    empty.mkdir()
    (empty / "metrics.jsonl").write_text("")
    status, err = report(str(empty))
    assert status == 1 and "has no finished step yet" in err
    assert not Path("report").exists()


def test_a_resumed_run_replaces_the_tensorboard_steps_after_its_checkpoint(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    config = ConfigView(RunConfig(plugin_options={
        "tensorboard": TensorBoardOptions(enabled=True, samples=0)}))
    first = TensorBoardLogger()
    first.on_run_start(config, str(tmp_path), 0)
    for step in (1, 2, 3):
        first.on_step_end(step, {"reward/mean": float(step)})
    first.on_run_end(str(tmp_path), "interrupted", None)
    resumed = TensorBoardLogger()  # the checkpoint was at step 1
    resumed.on_run_start(config, str(tmp_path), 1)
    resumed.on_step_end(2, {"reward/mean": 20.0})
    resumed.on_run_end(str(tmp_path), "completed", None)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward/mean")] == [(1, 1.0), (2, 20.0)]


def test_tensorboard_without_its_package_is_refused_with_the_options(monkeypatch):
    import importlib.util

    from rollyard.errors import ConfigError
    from rollyard.options import build_options
    from rollyard_plugins.loggers.tensorboard import TensorBoardOptions

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ConfigError, match=r"--tensorboard needs the tensorboard package"):
        build_options(TensorBoardOptions, "tensorboard", {"enabled": True})
    assert not build_options(TensorBoardOptions, "tensorboard", {}).enabled  # off: no need
