"""The typed configuration: options declared once, RunConfig built from layers, saved and loaded,
and the shape of the core (no argparse past the CLI, no import cycles)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from rollyard import ConfigError, PluginError, Rollout, hookimpl
from rollyard.config import ConfigView, RunConfig, build_run_config
from rollyard.interfaces import RolloutContext
from rollyard.options import at_least, build_options, option, option_specs
from rollyard.train_flags import TrainFlags

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class MazeOptions:
    size: int = option(5, check=at_least(2), help="cells per side")
    style: Literal["grid", "cave"] = option("grid", help="how walls are drawn")
    seed_offset: int | None = option(None, help="added to the run's seed")
    walls: tuple[str, ...] = option(("n", "s"), help="sides with walls")
    lit: bool = option(False, help="the maze is lit")

    def __post_init__(self) -> None:
        if self.style == "cave" and self.size > 50:
            raise ValueError("caves are at most 50 cells wide")


class Maze(Rollout):
    name = "maze"
    Options = MazeOptions

    def tasks(self, split):
        return []

    async def run_group(self, task, n):
        return []


class MazePlugin:
    @hookimpl
    def register_rollouts(self, register):
        register(Maze)


@pytest.fixture
def maze_flags(plugin_manager) -> TrainFlags:
    plugin_manager.register(MazePlugin(), name="maze")
    return TrainFlags(argparse.ArgumentParser(prog="rollyard train"), plugin_manager)


# --------------------------------------------------------------------------- declaration


def test_specs_come_from_the_dataclass():
    specs = {s.name: s for s in option_specs(MazeOptions, "maze")}
    assert specs["size"].flag == "--maze-size" and specs["size"].default == 5
    assert specs["style"].choices == ("grid", "cave")
    assert specs["seed_offset"].optional and specs["seed_offset"].type_name == "int | None"
    assert specs["walls"].repeated and specs["walls"].type_name == "list[str]"
    assert specs["seed_offset"].flag == "--maze-seed-offset"


def test_help_shows_every_default(maze_flags):
    text = " ".join(maze_flags.parser.format_help().split())
    for expected in ("cells per side (default: 5)", "how walls are drawn (default: grid)",
                     "sides with walls (default: n, s)", "the maze is lit (default: False)",
                     "training steps (default: 150)", "maze (plugin options)"):
        assert expected in text


def test_flags_parse_into_a_typed_instance(maze_flags):
    config = maze_flags.parse(["--maze-size", "9", "--maze-walls", "e", "--maze-walls", "w",
                               "--maze-lit", "--steps", "4"])
    assert config.plugin_options["maze"] == MazeOptions(size=9, walls=("e", "w"), lit=True)
    assert config.steps == 4


@pytest.mark.parametrize("argv, message", [
    (["--maze-size", "1"], "--maze-size: 1: must be at least 2"),
    (["--maze-size", "x"], "--maze-size: 'x' is not a int"),
    (["--maze-style", "tube"], "--maze-style: 'tube': choose one of ['grid', 'cave']"),
    (["--steps", "0"], "--steps: 0: must be greater than 0"),
])
def test_bad_flags_are_usage_errors_naming_the_flag(maze_flags, capsys, argv, message):
    with pytest.raises(SystemExit):
        maze_flags.parse(argv)
    assert message in " ".join(capsys.readouterr().err.split()).replace("argument ", "")


def test_cross_field_validation_names_the_plugin(maze_flags):
    with pytest.raises(ConfigError, match=r"--maze-\* options: caves are at most 50"):
        maze_flags.parse(["--maze-style", "cave", "--maze-size", "60"])


def test_an_option_without_a_default_is_refused():
    @dataclass(frozen=True)
    class NoDefault:
        depth: int

    with pytest.raises(PluginError, match=r"option 'depth' .* has no default"):
        option_specs(NoDefault, "x")


def test_two_option_classes_under_one_prefix_are_refused(plugin_manager):
    @dataclass(frozen=True)
    class Other:
        size: int = 3

    class Maze2(Maze):
        name = "maze2"
        Options = Other
        options_prefix = "maze"

    class Both:
        @hookimpl
        def register_rollouts(self, register):
            register(Maze)
            register(Maze2)

    plugin_manager.register(Both(), name="both")
    with pytest.raises(PluginError, match=r"options --maze-\* are declared twice"):
        plugin_manager.option_tables()


# --------------------------------------------------------------------------- layers


def test_flags_win_over_toml_over_defaults(maze_flags, tmp_path):
    (tmp_path / "run.toml").write_text('steps = 3\nseed = 9\n[maze]\nsize = 7\nstyle = "cave"\n')
    argv = ["--config", str(tmp_path / "run.toml"), "--steps", "5", "--maze-size", "8"]
    config = maze_flags.parse(argv)
    assert (config.steps, config.seed, config.group_size) == (5, 9, 8)
    assert config.plugin_options["maze"] == MazeOptions(size=8, style="cave")


@pytest.mark.parametrize("data, message", [
    ({"stepz": 1}, "run.toml: unknown option 'stepz' (no flag --stepz)"),
    ({"maze": {"colour": 1}}, "run.toml: unknown option [maze] 'colour'"),
    ({"maze": {"size": "big"}}, "run.toml: [maze] 'size': expected int, got 'big'"),
    ({"maze": {"walls": "n"}}, "run.toml: [maze] 'walls': expected a list"),
    ({"lab": {"size": 1}}, "run.toml: unknown table [lab]"),
    ({"top_p": 1.5}, "run.toml: 'top_p' 1.5: must be within"),
    ({"reward": ["exact-match=heavy"]}, "weight 'heavy' is not a number"),
])
def test_bad_toml_values_name_the_key(maze_flags, data, message):
    with pytest.raises(ConfigError) as caught:
        build_run_config(maze_flags.tables, [("run.toml", data)])
    assert message in str(caught.value)


def test_config_json_round_trips(maze_flags, tmp_path):
    config = maze_flags.parse(["--maze-walls", "e", "--reward", "exact-match=2", "--seed", "4"])
    config.save(tmp_path / "config.json")
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["maze"]["walls"] == ["e"] and data["reward"] == ["exact-match=2"]
    assert RunConfig.load(tmp_path / "config.json", maze_flags.tables) == config


def test_loading_a_config_checks_it_again(maze_flags, tmp_path):
    data = RunConfig().to_data() | {"steps": -1}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"config.json'?: 'steps' -1: must be greater"):
        RunConfig.load(tmp_path / "config.json", maze_flags.tables)


def test_run_config_is_frozen_and_checked_on_construction():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunConfig().steps = 3
    with pytest.raises(ConfigError, match="--group-size 0: must be greater than 0"):
        RunConfig(group_size=0)


def test_a_decaying_learning_rate_keeps_its_horizon_across_a_resume():
    config = RunConfig(steps=600, lr_decay_style="cosine")
    assert config.lr_decay_steps == 600 and config.to_data()["lr_decay_steps"] == 600
    # a resume that runs longer keeps the saved horizon (config.json holds it resolved)
    assert config.replace(steps=900).lr_decay_steps == 600
    assert RunConfig(steps=600).lr_decay_steps is None  # constant: no horizon
    with pytest.raises(ConfigError, match="--lr-decay-steps 10 must be more than "
                                          "--lr-warmup-steps 10"):
        RunConfig(steps=10, lr_decay_style="cosine", lr_warmup_steps=10)
    with pytest.raises(ConfigError, match="--lr-decay-style 'step'"):
        RunConfig(lr_decay_style="step")


def test_the_default_minibatches_are_one_per_four_groups_and_saved_resolved():
    assert RunConfig(groups_per_step=32).minibatches == 8
    assert RunConfig(groups_per_step=6).minibatches == 1
    assert RunConfig(groups_per_step=1).minibatches == 1
    assert RunConfig(groups_per_step=32, minibatches=3).minibatches == 3
    config = RunConfig(groups_per_step=16)
    assert config.to_data()["minibatches"] == 4
    assert config.replace(groups_per_step=64).minibatches == 4  # a saved config keeps its own
    with pytest.raises(ConfigError, match="--minibatches"):
        RunConfig(minibatches=0)


def test_plugins_receive_a_read_only_view_and_typed_options():
    config = RunConfig(seed=3, plugin_options={"maze": MazeOptions()})
    view = ConfigView(config)
    assert view.seed == 3 and view["seed"] == 3 and view.get("max_new_tokens") == 24
    assert view["maze"] == dataclasses.asdict(MazeOptions()) | {"walls": ["n", "s"]}
    with pytest.raises(TypeError):
        view["seed"] = 4  # type: ignore[index]
    rollout = Maze(RolloutContext(config=view, tokenizer=None, transport=None,
                                  options={"size": 4}, rng=None))
    assert rollout.context.options == MazeOptions(size=4)
    assert rollout.context.sampling.max_new_tokens > 0  # never None


def test_build_options_names_unknown_keys():
    with pytest.raises(ConfigError, match=r"unknown option \[maze\] 'colour'"):
        build_options(MazeOptions, "maze", {"colour": "red"}, "config.json")


# --------------------------------------------------------------------------- code shape

SOURCES = [ROOT / "core", ROOT / "plugins", ROOT / "plugins-codegolf", ROOT / "plugins-verifiers"]


def python_files() -> list[Path]:
    return [p for root in SOURCES for p in root.rglob("*.py") if "templates" not in p.parts]


def test_no_argparse_namespace_outside_the_cli():
    offenders = [str(p.relative_to(ROOT)) for p in python_files()
                 if p.name != "cli.py" and "argparse.Namespace" in p.read_text()]
    assert not offenders


def module_name(path: Path) -> str:
    for root in SOURCES:
        if root in path.parents:
            parts = list(path.relative_to(root).with_suffix("").parts)
            return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    raise ValueError(path)


def module_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of the project that ``path`` imports at module level (not inside functions or
    ``if TYPE_CHECKING``), resolved to the longest known module name."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def test_no_import_cycles_in_the_core_or_the_plugins():
    modules = {module_name(p): p for p in python_files()}
    known = set(modules)
    graph = {name: module_imports(path, known) - {name} for name, path in modules.items()}
    # a package's __init__ importing its own submodules is not a cycle of the submodule
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in graph[node]:
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue
            if state.get(nxt) == "open":
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, f"import cycles: {cycles[:3]}"
