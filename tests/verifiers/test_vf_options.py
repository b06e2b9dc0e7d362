"""The plugin's options as the ``train`` parser sees them."""

from __future__ import annotations

import argparse

import pytest
from rollyard.options import PluginOptionGroup, plugin_options
from rollyard_verifiers import plugin


def parse(*argv: str) -> dict:
    parser = argparse.ArgumentParser()
    plugin.add_options(PluginOptionGroup(parser, "verifiers"))
    return plugin_options(parser.parse_args(list(argv)), "verifiers")


@pytest.mark.parametrize("flag", ["--verifiers-env", "--vf-env"])
def test_the_environment_is_named_by_either_flag(flag: str) -> None:
    options = parse(flag, "rollyard_codegolf.verifiers_env", "--verifiers-max-turns", "2")
    assert options == {"env": "rollyard_codegolf.verifiers_env", "env_config": None,
                       "eval_config": None, "max_turns": 2, "max_tasks": None,
                       "concurrency": 32}
