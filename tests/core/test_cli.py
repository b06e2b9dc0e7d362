"""The ``rollyard`` command line: ``plugins``, ``train --help``, plugin selection errors and
``--config run.toml``. Most tests run the installed console script in a fresh process."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
import textwrap
import warnings

import pytest
from rollyard import cli
from rollyard.run import driver
from rollyard_plugins.toy import ToyOptions

STANDARD = {  # entry point -> (module, what it registers)
    "toy": ("rollyard_plugins.toy", {"rollout": ["toy"]}),
    "basic-rewards": ("rollyard_plugins.basic_rewards",
                      {"reward": ["exact-match", "char-f1"]}),
    "console": ("rollyard_plugins.loggers.console", {}),
    "jsonl": ("rollyard_plugins.loggers.jsonl:plugin", {}),
    "reward-plot": ("rollyard_plugins.loggers.reward_plot", {}),
    "tensorboard": ("rollyard_plugins.loggers.tensorboard:plugin", {}),
    "report": ("rollyard_plugins.report", {"command": ["report"]}),
}

SHAPES_MODULE = """
from rollyard import Rollout, hookimpl

class Shapes(Rollout):
    name = "shapes"

@hookimpl
def register_rollouts(register):
    register(Shapes)

@hookimpl
def add_options(group):
    group.add_argument("--shapes-sides", type=int, default=3, help="corners per shape")
"""


def plugins_json(rollyard_cli, *args, **kwargs) -> dict[str, dict]:
    result = rollyard_cli("plugins", "--json", *args, **kwargs)
    assert result.returncode == 0, result.stderr
    return {record["name"]: record for record in json.loads(result.stdout)}


def help_sections(text: str) -> dict[str, str]:
    """argparse help split at its unindented ``title:`` lines."""
    sections: dict[str, str] = {}
    title = ""
    for line in text.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            title = line[:-1]
            sections[title] = ""
        elif title:
            sections[title] += line + "\n"
    return sections


# --------------------------------------------------------------------------- rollyard plugins


def test_plugins_json_lists_the_standard_plugins(rollyard_cli):
    records = plugins_json(rollyard_cli)
    version = md.version("rollyard")
    for name, (entry_point, registers) in STANDARD.items():
        record = records[name]
        assert record["distribution"] == "rollyard"
        assert record["version"] == version
        assert record["entry_point"] == entry_point
        assert record["registers"] == registers
        assert record["errors"] == []
    assert records["jsonl"]["hooks"] == ["on_run_start", "on_samples", "on_step_end"]
    assert records["toy"]["hooks"] == ["register_rollouts"]


def test_plugins_hook_filter_keeps_only_implementers(rollyard_cli):
    records = plugins_json(rollyard_cli, "--hook", "on_samples")
    assert "jsonl" in records and "toy" not in records and "console" not in records
    assert all("on_samples" in r["hooks"] for r in records.values())


def test_plugins_table(rollyard_cli):
    result = rollyard_cli("plugins")
    assert result.returncode == 0, result.stderr
    for text in ("rollyard plugins", "basic-rewards", "reward: exact-match, char-f1",
                 "rollout: toy"):
        assert text in result.stdout


def test_plugins_lists_a_broken_plugin_beside_the_working_ones(rollyard_cli, make_distribution):
    make_distribution("rollyard-shapes", {"ry_shapes.py": SHAPES_MODULE}, {"shapes": "ry_shapes"})
    site = make_distribution("rollyard-broken", {"ry_broken.py": "import no_such_module_xyz\n"},
                             {"broken": "ry_broken"})
    result = rollyard_cli("plugins", "--json", paths=[site])
    assert result.returncode == 0
    records = {r["name"]: r for r in json.loads(result.stdout)}
    assert records["broken"]["errors"] == [
        "importing 'ry_broken' raised ModuleNotFoundError: No module named 'no_such_module_xyz' "
        "(distribution 'rollyard-broken', entry point 'ry_broken')"]
    assert records["shapes"]["registers"] == {"rollout": ["shapes"]}
    assert records["toy"]["errors"] == []
    assert "warning: rollyard plugin 'broken': importing 'ry_broken'" in result.stderr


def test_trace_mode_logs_hook_calls(rollyard_cli):
    result = rollyard_cli("train", "--help", env={"ROLLYARD_TRACE_PLUGINS": "1"})
    assert result.returncode == 0
    assert "[rollyard trace] register_rollouts -> ['toy']" in result.stderr


def test_no_command_prints_help(rollyard_cli):
    result = rollyard_cli()
    assert result.returncode == 2
    assert "plugins" in result.stdout and "train" in result.stdout


# --------------------------------------------------------------------------- rollyard train


def test_train_help_groups_options_by_owner(rollyard_cli, make_distribution):
    site = make_distribution("rollyard-shapes", {"ry_shapes.py": SHAPES_MODULE},
                             {"shapes": "ry_shapes"})
    result = rollyard_cli("train", "--help", paths=[site])
    assert result.returncode == 0, result.stderr
    sections = help_sections(result.stdout)
    expected = {"run": "--steps", "rollout": "--rollout-plugin NAME", "inference": "--engine NAME",
                "training": "--train-tp", "toy (plugin options)": "--toy-operation {copy,reverse}",
                "evaluation": "--eval-interval N",
                "tensorboard (plugin options)": "--tensorboard-enabled, --no-tensorboard-enabled, "
                                                "--tensorboard, --no-tensorboard",
                "shapes (plugin options)": "--shapes-sides SIDES"}
    for title, option in expected.items():
        assert option in sections[title], f"{option} not under {title!r}"
    assert "--toy-" not in sections["shapes (plugin options)"]
    assert "corners per shape" in sections["shapes (plugin options)"]


def test_unknown_rollout_plugin_lists_available_names(rollyard_cli):
    result = rollyard_cli("train", "--rollout-plugin", "tyo")
    assert result.returncode == 1
    error = " ".join(result.stderr.split())
    assert "no rollout named 'tyo' is installed; available:" in error
    assert "toy" in error.split("available:")[1]
    assert "Did you mean 'toy'?" in error
    assert "Traceback" not in result.stderr


# --------------------------------------------------------------------------- --config run.toml


@pytest.fixture
def parsed(monkeypatch, tmp_path):
    """Run ``rollyard.cli.main`` in-process and return the options ``train`` would receive."""
    for variable in ("ROLLYARD_LOAD_PLUGINS", "ROLLYARD_DISABLE_PLUGINS",
                     "ROLLYARD_TRACE_PLUGINS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # main() sets it
    received = []
    monkeypatch.setattr(driver, "run_training",
                        lambda config, manager, defaults, resume=None:
                        received.append(config) or 0)

    def parse(toml: str, *argv: str):
        (tmp_path / "run.toml").write_text(textwrap.dedent(toml))
        assert cli.main(["train", "--config", "run.toml", *argv]) == 0
        return received.pop()

    return parse


RUN_TOML = """
    steps = 3
    seed = 7
    rollout_plugin = "toy"
    reward = ["exact-match=2", "char-f1"]

    [toy]
    operation = "reverse"
    num-tasks = 50
"""


def test_config_toml_supplies_options(parsed):
    config = parsed(RUN_TOML)
    assert (config.steps, config.seed, config.rollout_plugin) == (3, 7, "toy")
    assert config.reward_weights == {"exact-match": 2.0, "char-f1": 1.0}
    assert config.plugin_options["toy"] == ToyOptions(operation="reverse", num_tasks=50)
    assert config.group_size == 8  # untouched default


def test_config_toml_loses_to_command_line_flags(parsed):
    config = parsed(RUN_TOML, "--steps", "5", "--toy-operation", "copy", "--reward", "char-f1")
    assert config.steps == 5 and config.seed == 7
    assert config.plugin_options["toy"] == ToyOptions(operation="copy", num_tasks=50)
    assert config.reward_weights == {"char-f1": 1.0}


@pytest.mark.parametrize("toml, message", [
    ("stepz = 3\n", "run.toml: unknown option 'stepz' (no flag --stepz)"),
    ("[toy]\nflavour = 1\n", "run.toml: unknown option [toy] 'flavour' (no plugin option "
                             "--toy-flavour)"),
    ("steps = -3\n", "run.toml: 'steps' -3: must be greater than 0"),
    ("steps = '3'\n", "run.toml: 'steps': expected int, got '3'"),
    ("[toy]\noperation = 'rotate'\n", "run.toml: [toy] 'operation' 'rotate': choose one of "
                                      "['copy', 'reverse']"),
    ("steps = \n", "config file 'run.toml' is not valid TOML"),
    ("rollout_plugin = 'tyo'\n", "no rollout named 'tyo' is installed"),
], ids=["unknown-key", "unknown-plugin-key", "bad-value", "bad-type", "bad-choice", "bad-toml",
        "unknown-rollout"])
def test_config_toml_errors_name_the_key(rollyard_cli, tmp_path, toml, message):
    (tmp_path / "run.toml").write_text(toml)
    result = rollyard_cli("train", "--config", "run.toml", cwd=tmp_path)
    assert result.returncode == 1
    assert message in " ".join(result.stderr.split())


def test_config_file_missing(rollyard_cli, tmp_path):
    result = rollyard_cli("train", "--config", "nowhere.toml", cwd=tmp_path)
    assert result.returncode == 1
    assert "config file 'nowhere.toml' does not exist" in result.stderr


# --------------------------------------------------------------------------- light imports

HEAVY = ("torch", "ray", "megatron", "transformers", "verifiers")
PROBE = """
import contextlib, io, json, sys
from rollyard.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
heavy = {m.split(".")[0] for m in sys.modules} & set(json.loads(HEAVY))
print(json.dumps(sorted(heavy)))
"""


@pytest.mark.parametrize("argv", [["plugins"], ["train", "--help"]], ids=" ".join)
def test_listing_and_help_import_no_heavy_modules(argv):
    result = subprocess.run([sys.executable, "-c", PROBE.replace("HEAVY", repr(json.dumps(HEAVY))),
                             *argv], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == []


# --------------------------------------------------------------------------- algorithms


@pytest.mark.parametrize("argv, message", [
    (["--algorithm", "dpo"], "no algorithm named 'dpo' is installed; available: dapo, dr-grpo, "
                             "grpo, gspo, rloo. Did you mean 'dapo'?"),
    (["--algorithm", "grpo", "--dapo-clip-high", "0.3"],
     "--dapo-clip-high set, but this run does not use 'dapo'"),
    (["--algorithm", "dapo", "--dapo-clip-low", "-0.1"], "clip_low"),
    (["--algorithm", "dapo", "--dapo-clip-low", "0.3", "--dapo-clip-high", "0.2"],
     "clip_low=0.3 is greater than clip_high=0.2"),
    (["--tis-cap", "0"], "argument --tis-cap: 0.0: must be greater than 0"),
    (["--tis-cap", "-2"], "argument --tis-cap: -2.0: must be greater than 0"),
], ids=["unknown", "option-without-plugin", "negative-clip", "low-above-high", "tis-zero",
        "tis-negative"])
def test_bad_algorithm_input_is_named_before_anything_starts(rollyard_cli, tmp_path, argv,
                                                             message):
    result = rollyard_cli("train", "--runs-dir", str(tmp_path / "runs"), *argv, cwd=tmp_path)
    assert result.returncode in (1, 2)
    assert message in " ".join(result.stderr.split())
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
