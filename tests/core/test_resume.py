"""``rollyard train --resume RUN_DIR``: the saved config.json comes back, flags may change only
how long the run goes on, where it runs and what it prints, and a folder without a usable
checkpoint, or one whose model, layout, rollout or algorithm would change, is refused with a
message naming what is wrong, before anything starts."""

from __future__ import annotations

import argparse
import json
import shutil
import warnings
from pathlib import Path

import pytest
from rollyard import cli
from rollyard.plugins import PluginManager
from rollyard.run import driver
from rollyard.run.checkpoints import CheckpointStore
from rollyard.train_flags import TrainFlags


def write_run(run_dir: Path, model_dir: Path, *argv: str, checkpoint_step: int | None = 2,
              ) -> Path:
    """A run folder as ``rollyard train`` leaves it: config.json and a checkpoint whose HF
    folder is ``model_dir``'s config (the body is not read by these checks)."""
    manager = PluginManager()
    manager.load_all()
    config = TrainFlags(argparse.ArgumentParser(), manager).parse(
        ["--model", str(model_dir), "--steps", "10", "--seed", "3", *argv])
    run_dir.mkdir(parents=True)
    config.replace(plugin_options={"toy": config.plugin_options["toy"]}).save(
        run_dir / "config.json")
    if checkpoint_step is not None:
        def write(folder: Path) -> dict:
            (folder / "hf").mkdir()
            shutil.copy(model_dir / "config.json", folder / "hf" / "config.json")
            return {"weight_version": checkpoint_step}

        CheckpointStore(run_dir).save(checkpoint_step, write)
    return run_dir


@pytest.fixture
def train(monkeypatch, tmp_path, capsys):
    """``rollyard train ARGS`` in-process: (exit status, stderr)."""
    for variable in ("ROLLYARD_LOAD_PLUGINS", "ROLLYARD_DISABLE_PLUGINS",
                     "ROLLYARD_TRACE_PLUGINS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")  # rich folds long paths at the terminal's width
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # main() sets it

    def run(*argv: str) -> tuple[int, str]:
        status = cli.main(["train", *argv])
        return status, " ".join(capsys.readouterr().err.split())

    return run


@pytest.fixture
def received(monkeypatch) -> list:
    """What ``run_training`` would receive: (config, resume) per call."""
    calls: list = []
    monkeypatch.setattr(driver, "run_training", lambda config, manager, defaults, resume=None:
                        calls.append((config, resume)))
    return calls


def test_resume_keeps_the_saved_config_and_takes_safe_flags(train, received, tmp_path,
                                                            tiny_model_dir):
    run_dir = write_run(tmp_path / "runs" / "r", tiny_model_dir, "--toy-operation", "reverse")
    status, err = train("--resume", str(run_dir), "--steps", "20", "--save-interval", "5",
                        "--max-seconds", "60", "--no-progress", "--eval-interval", "4",
                        "--log-samples-every", "10", "--tensorboard")
    assert status == 0, err
    config, resume = received.pop()
    assert resume == str(run_dir)
    assert (config.steps, config.save_interval, config.max_seconds, config.progress) == (
        20, 5, 60.0, False)
    # evaluation, records and observers' options change nothing a step computes
    assert (config.eval_interval, config.log_samples_every) == (4, 10)
    assert config.plugin_options["tensorboard"].enabled
    assert config.seed == 3 and config.model == str(tiny_model_dir)
    assert config.plugin_options["toy"].operation == "reverse"


@pytest.mark.parametrize("argv, flag, before, after", [
    (["--train-tp", "2"], "--train-tp", "1", "2"),
    (["--train-dp", "2"], "--train-dp", "1", "2"),
    (["--rollout-plugin", "codegolf"], "--rollout-plugin", "'toy'", "'codegolf'"),
    (["--algorithm", "grpo"], "--algorithm", "'dapo'", "'grpo'"),
    (["--seed", "4"], "--seed", "3", "4"),
    (["--toy-operation", "reverse"], "--toy-operation", "'copy'", "'reverse'"),
], ids=["tp", "dp", "rollout", "algorithm", "seed", "plugin-option"])
def test_resume_refuses_a_change_that_alters_the_run(train, received, tmp_path, tiny_model_dir,
                                                      argv, flag, before, after):
    run_dir = write_run(tmp_path / "runs" / "r", tiny_model_dir)
    status, err = train("--resume", str(run_dir), *argv)
    assert status == 1 and not received
    assert f"{flag} differs from the run's ({before} there, {after} now)" in err
    allowed = err.split("; only ")[1]
    assert all(f in allowed for f in ("--steps", "--save-interval", "--max-seconds"))


def test_resume_refuses_another_model_folder(train, received, tmp_path, tiny_model_dir):
    run_dir = write_run(tmp_path / "runs" / "r", tiny_model_dir)
    other = tmp_path / "other-model"
    shutil.copytree(tiny_model_dir, other)
    status, err = train("--resume", str(run_dir), "--model", str(other))
    assert status == 1 and not received
    assert f"--model differs from the run's ('{tiny_model_dir}' there, '{other}' now)" in err


def test_resume_refuses_a_model_folder_that_changed_since_the_checkpoint(train, tmp_path,
                                                                          tiny_model_dir):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model)
    run_dir = write_run(tmp_path / "runs" / "r", model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "hidden_size": 128}))
    status, err = train("--resume", str(run_dir))
    assert status == 1
    assert "is not the model of the checkpoint" in err
    assert "config.json field 'hidden_size' is 128 there but 64 in the checkpoint" in err


def test_resume_of_a_folder_that_is_not_a_run(train, tmp_path):
    (tmp_path / "empty").mkdir()
    status, err = train("--resume", str(tmp_path / "empty"))
    assert status == 1
    assert f"--resume '{tmp_path / 'empty'}' is not a run folder (it has no config.json)" in err
    status, err = train("--resume", str(tmp_path / "nowhere"))
    assert status == 1 and "no such folder" in err


def test_resume_of_a_run_without_a_checkpoint(train, tmp_path, tiny_model_dir):
    run_dir = write_run(tmp_path / "runs" / "r", tiny_model_dir, checkpoint_step=None)
    status, err = train("--resume", str(run_dir))
    assert status == 1
    assert f"no complete checkpoint in {run_dir / 'checkpoints'}" in err
    assert "the run stopped before it saved one" in err
    assert not (run_dir / "metrics.jsonl").exists()  # nothing started


def test_resume_of_a_run_whose_only_checkpoint_is_half_written(train, tmp_path, tiny_model_dir):
    run_dir = write_run(tmp_path / "runs" / "r", tiny_model_dir, checkpoint_step=None)
    (run_dir / "checkpoints" / ".partial-step-000002" / "trainer").mkdir(parents=True)
    status, err = train("--resume", str(run_dir))
    assert status == 1
    assert ("(checkpoints: .partial-step-000002 is half-written (the run stopped while saving "
            "it); no complete checkpoint remains)") in err


def test_resume_of_a_finished_run_asks_for_more_steps(train, tmp_path, tiny_model_dir):
    run_dir = write_run(tmp_path / "runs" / "r", tiny_model_dir, checkpoint_step=10)
    status, err = train("--resume", str(run_dir))
    assert status == 1
    assert "the checkpoint is at step 10 and --steps is 10; pass a larger --steps" in err
