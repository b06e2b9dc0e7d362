"""The plugin's options as the ``train`` parser sees them."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from rollyard.plugins import PluginManager
from rollyard.train_flags import TrainFlags
from rollyard_verifiers import plugin
from rollyard_verifiers.rollout import VerifiersRollout


def parse(*argv: str) -> dict:
    manager = PluginManager(environ={})
    manager.register(plugin, name="verifiers")
    parser = argparse.ArgumentParser()
    flags = TrainFlags(parser, manager)
    config = flags.parse(argv)
    return dataclasses.asdict(config.options_for(VerifiersRollout, "verifiers"))


@pytest.mark.parametrize("flag", ["--verifiers-env", "--vf-env"])
def test_the_environment_is_named_by_either_flag(flag: str) -> None:
    options = parse(flag, "rollyard_codegolf.verifiers_env", "--verifiers-max-turns", "2")
    assert options == {"env": "rollyard_codegolf.verifiers_env", "version": None,
                       "env_config": None,
                       "eval_config": None, "max_turns": 2, "max_tasks": None,
                       "concurrency": 32}
