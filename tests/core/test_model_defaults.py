"""Pretrained defaults: a model folder that ``rollyard init-model`` did not build gets the
pretrained defaults for every option the user left unset; flags and run.toml always win."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from rollyard.config import RunConfig
from rollyard.models.origin import (
    INIT_MARKER,
    PRETRAINED_DEFAULTS,
    defaults_line,
    write_init_marker,
)
from rollyard.train_flags import TrainFlags


@pytest.fixture
def flags(plugin_manager) -> TrainFlags:
    return TrainFlags(argparse.ArgumentParser(prog="rollyard train"), plugin_manager)


@pytest.fixture
def pretrained_dir(tmp_path) -> Path:
    folder = tmp_path / "pretrained"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    return folder


@pytest.fixture
def scratch_dir(tmp_path) -> Path:
    folder = tmp_path / "scratch"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "qwen3"}')
    write_init_marker(folder, arch="qwen3", size="tiny", seed=0)
    return folder


def test_a_folder_without_the_marker_gets_the_pretrained_defaults(flags, pretrained_dir):
    config = flags.parse(["--model", str(pretrained_dir)])
    assert config.model_defaults == "pretrained"
    for name, value in PRETRAINED_DEFAULTS.items():
        assert getattr(config, name) == value, name
    assert config.lr != RunConfig().lr
    # derived defaults follow the pretrained values (one update per 4 groups)
    assert config.minibatches == PRETRAINED_DEFAULTS["groups_per_step"] // 4


def test_an_init_model_folder_and_no_model_keep_the_from_scratch_defaults(flags, scratch_dir):
    for argv in (["--model", str(scratch_dir)], []):
        config = flags.parse(argv)
        assert config.model_defaults == "scratch"
        assert (config.lr, config.groups_per_step) == (RunConfig().lr,
                                                       RunConfig().groups_per_step)


def test_flags_and_toml_win_over_the_pretrained_defaults(flags, pretrained_dir, tmp_path):
    (tmp_path / "run.toml").write_text("groups_per_step = 3\n")
    config = flags.parse(["--model", str(pretrained_dir), "--lr", "2e-5",
                          "--config", str(tmp_path / "run.toml")])
    assert (config.lr, config.groups_per_step) == (2e-5, 3)
    assert config.micro_batch_tokens == PRETRAINED_DEFAULTS["micro_batch_tokens"]
    line = defaults_line(config.to_data())
    assert "--lr 2e-05 (set)" in line and "--groups-per-step 3 (set)" in line
    assert "--micro-batch-tokens 2048 (flags win" in line


def test_the_choice_can_be_forced_either_way(flags, pretrained_dir, scratch_dir):
    assert flags.parse(["--model", str(pretrained_dir), "--model-defaults", "scratch"]).lr \
        == RunConfig().lr
    assert flags.parse(["--model", str(scratch_dir), "--model-defaults", "pretrained"]).lr \
        == PRETRAINED_DEFAULTS["lr"]


def test_config_json_records_the_resolved_choice(flags, pretrained_dir, tmp_path):
    config = flags.parse(["--model", str(pretrained_dir)])
    config.save(tmp_path / "config.json")
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["model_defaults"] == "pretrained" and data["lr"] == PRETRAINED_DEFAULTS["lr"]
    # loaded again (a resume), the saved values stand even if the folder changed since
    write_init_marker(pretrained_dir)
    assert RunConfig.load(tmp_path / "config.json", flags.tables) == config


def test_init_model_writes_the_marker(tmp_path):
    from rollyard.models.tiny import build_tiny_model

    folder = build_tiny_model(tmp_path / "m", seed=1)
    marker = json.loads((folder / INIT_MARKER).read_text())
    assert marker == {"built_by": "rollyard init-model", "arch": "qwen3", "size": "tiny",
                      "seed": 1}
