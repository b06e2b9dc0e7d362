"""One config, decoded once: every plugin's options (``add_options`` ones included) are decoded
by one function into one typed form; a run's config crosses to its rollout workers as data and
is decoded there once; observers get a typed view that cannot change; no import cycle joins the
package, its config and its plugin manager."""

from __future__ import annotations

import dataclasses
import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rollyard import Algorithm, ConfigError, Reward, RewardContext, hookimpl
from rollyard.config import ConfigView, RunConfig, build_run_config
from rollyard.options import LegacyOptions, build_options
from rollyard.run.rollout_workers import RolloutSpec
from test_layering import CORE, imported_modules, module_name


class Counts(Reward):
    """A reward of an ``add_options`` plugin: no ``Options`` of its own."""

    name = "counts"

    async def score(self, sample, task):
        return float(self.context.options["bonus"])


class OldStylePlugin:
    """A plugin written before typed options: its options come from the hook."""

    @hookimpl
    def add_options(self, group):
        group.add_argument("--old-bonus", type=float, default=0.5, help="added to every score")
        group.add_argument("--old-mode", choices=["a", "b"], default="a")
        group.add_argument("--old-tag", action="append", default=[])

    @hookimpl
    def register_rewards(self, register):
        register(Counts)


@pytest.fixture
def old(plugin_manager):
    plugin_manager.register(OldStylePlugin(), name="old")
    return plugin_manager


def test_an_add_options_plugin_receives_a_generated_frozen_dataclass_that_reads_as_a_dict(old):
    config = build_run_config(old.option_tables(), [("run.toml", {"old": {"bonus": 2}})],
                              {"old:mode": "b"})
    options = config.options_for(Counts, "old")
    assert isinstance(options, LegacyOptions) and dataclasses.is_dataclass(options)
    assert (options.bonus, options.mode, options.tag) == (2.0, "b", [])  # typed by its `type`
    assert isinstance(options, Mapping) and options["bonus"] == 2.0
    assert options.get("mode") == "b" and options.get("missing", 7) == 7 and "tag" in options
    assert dict(options) == {"bonus": 2.0, "mode": "b", "tag": []} == options
    assert isinstance(options, dict) and json.loads(json.dumps(options)) == dict(options)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.bonus = 3.0
    reward = Counts(RewardContext(tokenizer=None, options=options))
    assert reward.context.options is options  # decoded once, handed on as it is
    # old code could change the dict it received (a copy); it still can, on its own instance
    sibling = config.options_for(Counts, "old")
    for change in (lambda: operator.setitem(options, "bonus", 3.0),
                   lambda: options.update(mode="a"), lambda: options.pop("tag")):
        with pytest.warns(DeprecationWarning, match="options of plugin 'old' through their "
                                                    "dict changes that dict only"):
            change()
    assert options == {"bonus": 3.0, "mode": "a"} and options.bonus == 2.0
    assert sibling == {"bonus": 2.0, "mode": "b", "tag": []} and sibling.mode == "b"
    assert config.to_data()["old"] == {"bonus": 2.0, "mode": "b", "tag": []}


def test_a_bad_value_in_an_add_options_table_names_the_table_and_the_key(old):
    tables = old.option_tables()
    with pytest.raises(ConfigError, match=r"^run\.toml: \[old\] 'bonus' 'lots': could not "
                                          r"convert string to float"):
        build_run_config(tables, [("run.toml", {"old": {"bonus": "lots"}})])
    with pytest.raises(ConfigError, match=r"^run\.toml: \[old\] 'mode': 'c' is not one of "
                                          r"\['a', 'b'\]"):
        build_run_config(tables, [("run.toml", {"old": {"mode": "c"}})])
    with pytest.raises(ConfigError, match=r"^run\.toml: unknown option \[old\] 'bonsu' \(no "
                                          r"plugin option --old-bonsu\); known: bonus, mode"):
        build_run_config(tables, [("run.toml", {"old": {"bonsu": 1}})])


def test_the_saved_config_decodes_to_the_same_options(old):
    tables = old.option_tables()
    config = build_run_config(tables, [], {"old:tag": ["x", "y"]})
    again = RunConfig.from_data(json.loads(json.dumps(config.to_data())), tables)
    assert again.plugin_options["old"] == config.plugin_options["old"]
    assert again.plugin_options["old"].tag == ["x", "y"]


@dataclass(frozen=True)
class ScaleOptions:
    """Options in the style of algorithms written before ``option()``."""

    scale: float = field(default=1.0, metadata={"help": "size of every advantage"})

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"scale is {self.scale!r}; it must be positive")


class Scaled(Algorithm):
    name = "scaled"
    Options = ScaleOptions

    def advantages(self, samples, step):
        return [self.options.scale for _ in samples]

    def policy_loss(self, batch):
        raise NotImplementedError


def test_an_algorithm_is_configurable_and_its_old_style_options_still_work(plugin_manager):
    plugin_manager.register(type("Algo", (), {"register_algorithms": staticmethod(
        hookimpl(lambda register: register(Scaled)))})(), name="algo")
    tables = plugin_manager.option_tables()
    assert [spec.flag for spec in tables.typed["scaled"].specs] == ["--scaled-scale"]
    config = build_run_config(tables, [("run.toml", {"scaled": {"scale": 2}})])
    assert config.plugin_options["scaled"] == ScaleOptions(scale=2.0)
    with pytest.raises(ConfigError, match=r"run\.toml: \[scaled\] 'scale': expected float, "
                                          r"got 'big'"):
        build_run_config(tables, [("run.toml", {"scaled": {"scale": "big"}})])
    assert Scaled().options == ScaleOptions()  # defaults
    assert Scaled({"scale": 3}).options == ScaleOptions(scale=3.0)  # a dict is decoded
    with pytest.raises(ConfigError, match=r"scale is -1\.0; it must be positive"):
        Scaled({"scale": -1})
    with pytest.raises(TypeError, match="takes ScaleOptions options"):
        Scaled(3.0)


def test_build_options_checks_raw_values_over_a_decoded_base(old):
    base = old.option_tables().legacy["old"].options_cls(bonus=2.0)
    changed = build_options(type(base), "old", {"mode": "b"}, "[[rollout]] 'x'", base=base)
    assert (changed.bonus, changed.mode) == (2.0, "b")
    with pytest.raises(ConfigError, match=r"\[\[rollout\]\] 'x': \[old\] 'bonus' 'no'"):
        build_options(type(base), "old", {"bonus": "no"}, "[[rollout]] 'x'", base=base)


def test_a_rollout_worker_decodes_the_config_once_into_a_typed_run_config(tiny_model_dir: Path,
                                                                         monkeypatch):
    config = RunConfig(rollout_plugin="toy", group_size=3, eval_samples=2, reward=("char-f1",))
    spec = RolloutSpec(config, {"char-f1": 1.0}, str(tiny_model_dir), ["http://127.0.0.1:9"])
    data = json.loads(json.dumps(spec.to_data()))  # what crosses to the worker's process
    built: list[RunConfig] = []
    post_init = RunConfig.__post_init__
    monkeypatch.setattr(RunConfig, "__post_init__",
                        lambda self: (built.append(self), post_init(self))[-1])
    from rollyard.run.rollout_workers import load_run
    from rollyard_plugins.toy import ToyOptions

    manager, decoded = load_run(data)
    assert len(built) == 1  # one decode, no second RunConfig to learn the plugins
    assert isinstance(decoded.config, RunConfig) and decoded.config.group_size == 3
    assert decoded.config.reward == ("char-f1",)
    assert decoded.config.plugin_options["toy"] == ToyOptions()  # its table, decoded
    assert ("rollout", "toy") in decoded.plugins() and "toy" in manager.names("rollout")


def test_the_workers_data_leaves_the_observers_tables_in_the_driver(tiny_model_dir: Path):
    from rollyard_plugins.loggers.tensorboard import TensorBoardOptions

    config = RunConfig(plugin_options={"tensorboard": TensorBoardOptions()})
    spec = RolloutSpec(config, {}, str(tiny_model_dir), [], driver_tables=frozenset(
        {"tensorboard"}))
    assert "tensorboard" not in spec.to_data()["config"]


def test_observers_get_a_typed_view_that_cannot_change():
    from rollyard_plugins.toy import ToyOptions

    config = RunConfig(steps=4, reward=("exact-match",),
                       plugin_options={"toy": ToyOptions(num_tasks=9)})
    view = ConfigView(config)
    assert view.steps == 4 and view.reward == ("exact-match",)  # typed attributes
    assert view.plugin_options["toy"] == ToyOptions(num_tasks=9)
    assert view["steps"] == 4 and view["toy"]["num_tasks"] == 9  # the data, as before
    assert view.get("reward") == ["exact-match"] and json.loads(json.dumps(view)) == \
        config.to_data()
    for change in (lambda: view.__setitem__("steps", 5), lambda: view.update(steps=5),
                   lambda: view["toy"].__setitem__("num_tasks", 1),
                   lambda: view["reward"].append("x"), lambda: view.pop("steps"),
                   lambda: operator.setitem(view.plugin_options, "toy", None)):
        with pytest.raises(TypeError):
            change()
    with pytest.raises(AttributeError, match="read-only"):
        view.steps = 5  # type: ignore[misc]
    assert config.to_data()["steps"] == 4 and view["toy"]["num_tasks"] == 9


def test_the_hook_facade_hands_observers_the_view(plugin_manager):
    seen: list[Any] = []

    class Observer:
        @hookimpl
        def on_run_start(self, config, run_dir):
            seen.append(config)

    plugin_manager.register(Observer(), name="observer")
    view = ConfigView(RunConfig(seed=5))
    plugin_manager.hooks.on_run_start(view, "/runs/x")
    assert seen == [view] and seen[0].seed == 5 and seen[0]["seed"] == 5


def _graph(package: Path) -> dict[str, set[str]]:
    root = package.parent
    modules = {module_name(path, root): path for path in package.rglob("*.py")
               if "templates" not in path.parts}
    return {name: {target for _, target in imported_modules(path, root)
                   if target in modules and target != name}
            for name, path in modules.items()}


def test_the_config_and_the_plugin_manager_are_in_no_import_cycle():
    graph = _graph(CORE)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    for module in ("rollyard", "rollyard.config", "rollyard.interfaces",
                   "rollyard.plugin_options", "rollyard.plugins", "rollyard.options",
                   "rollyard.configurable", "rollyard.algorithms"):
        assert not reaches(module, module), f"{module} imports itself through others"
