"""The plugin manager: registration hooks, observer hooks, bad plugins, allow/block lists,
tracing and lazy loading. Plugins are registered in-process (the ``plugin_manager`` fixture)
or installed as throwaway distributions with entry points (``make_distribution``)."""

from __future__ import annotations

import argparse
import random
import re
import sys
from types import SimpleNamespace

import pytest
from rollyard import (
    Command,
    Engine,
    PluginError,
    Reward,
    Rollout,
    RolloutContext,
    Sample,
    Transport,
    UnknownPluginError,
    hookimpl,
)
from rollyard.plugins import PluginManager, PluginWarning
from rollyard.types import Task


class CountdownRollout(Rollout):
    name = "countdown"

    def tasks(self, split: str) -> list[Task]:
        return [Task(id=f"{split}-{i}", prompt=f"count down from {i}") for i in range(3)]

    async def run_group(self, task: Task, n: int) -> list:
        return []


class LoopbackTransport(Transport):
    name = "loopback"

    async def generate(self, request):
        raise NotImplementedError("registration tests never generate")

    async def health(self):
        return {url: True for url in self.urls}

    async def weight_versions(self):
        return {url: 0 for url in self.urls}

    async def update_weights(self, model_dir, weight_version):
        return None


class LengthReward(Reward):
    name = "length"

    async def score(self, sample, task):
        return float(sample.response_len)


class NullEngine(Engine):
    name = "null-engine"

    def launch(self, model_dir, port):
        raise NotImplementedError("registration tests never launch")


class GreetCommand(Command):
    name = "greet"
    help = "print a greeting"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--who", default="world")

    def run(self, args: SimpleNamespace) -> int:
        print(f"hello {args.who}")
        return 0


class EverythingPlugin:
    """Registers one class of every kind."""

    @hookimpl
    def register_rollouts(self, register):
        register(CountdownRollout)

    @hookimpl
    def register_transports(self, register):
        register(LoopbackTransport)

    @hookimpl
    def register_rewards(self, register):
        register(LengthReward)

    @hookimpl
    def register_engines(self, register):
        register(NullEngine)

    @hookimpl
    def register_commands(self, register):
        register(GreetCommand)


class Recorder:
    """Observer plugin that records every call it receives."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    @hookimpl
    def on_run_start(self, config, run_dir):
        self.calls.append(("on_run_start", {"config": config, "run_dir": run_dir}))

    @hookimpl
    def on_samples(self, step, samples):
        self.calls.append(("on_samples", {"step": step, "samples": samples}))

    @hookimpl
    def on_step_end(self, step, metrics):
        self.calls.append(("on_step_end", {"step": step, "metrics": metrics}))

    @hookimpl
    def on_run_end(self, run_dir, status, error):
        self.calls.append(("on_run_end", {"run_dir": run_dir, "status": status, "error": error}))


# --------------------------------------------------------------------------- registration


@pytest.mark.parametrize("hook, kind, cls", [
    ("register_rollouts", "rollout", CountdownRollout),
    ("register_transports", "transport", LoopbackTransport),
    ("register_rewards", "reward", LengthReward),
    ("register_engines", "engine", NullEngine),
    ("register_commands", "command", GreetCommand),
])
def test_register_hooks_make_classes_selectable_by_name(plugin_manager, hook, kind, cls):
    record = plugin_manager.register(EverythingPlugin(), name="everything")
    assert hook in record.hooks
    assert plugin_manager.get(kind, cls.name) is cls
    assert plugin_manager.names(kind) == [cls.name]
    assert plugin_manager.owner(kind, cls.name) is record
    assert record.registers[kind] == [cls.name]
    assert record.errors == []


def test_register_rollouts_class_is_usable(plugin_manager):
    plugin_manager.register(EverythingPlugin(), name="everything")
    rollout_cls = plugin_manager.get("rollout", "countdown")
    rollout = rollout_cls(RolloutContext(config={}, tokenizer=None, transport=None, rewards=None,
                                         options={}, rng=random.Random(0)))
    assert [t.id for t in rollout.tasks("eval")] == ["eval-0", "eval-1", "eval-2"]


def test_register_transports_class_is_built_from_urls_and_its_options(plugin_manager):
    plugin_manager.register(EverythingPlugin(), name="everything")
    transport = plugin_manager.get("transport", "loopback")(("http://a:1", "http://b:2"),
                                                            {"timeout": 5})
    assert transport.urls == ["http://a:1", "http://b:2"] and transport.options == {"timeout": 5}


def test_register_engines_class_is_built_from_its_options(plugin_manager):
    plugin_manager.register(EverythingPlugin(), name="everything")
    assert plugin_manager.get("engine", "null-engine")({"threads": 2}).options == {"threads": 2}
    with pytest.raises(UnknownPluginError, match="available: null-engine"):
        plugin_manager.get("engine", "sglang-gpu")


def test_register_commands_adds_a_cli_subcommand(plugin_manager, capsys):
    from rollyard.cli import build_parser

    plugin_manager.register(EverythingPlugin(), name="everything")
    args = build_parser(plugin_manager).parse_args(["greet", "--who", "plugins"])
    assert args.handler(args) == 0
    assert capsys.readouterr().out == "hello plugins\n"


def test_unregister_forgets_what_the_plugin_registered(plugin_manager):
    plugin_manager.register(EverythingPlugin(), name="everything")
    plugin_manager.unregister("everything")
    assert all(plugin_manager.names(kind) == [] for kind in plugin_manager.registry)
    assert "everything" not in plugin_manager.records
    assert plugin_manager.pm.get_plugin("everything") is None


def test_unknown_name_lists_available_and_nearest(plugin_manager):
    plugin_manager.register(EverythingPlugin(), name="everything")
    with pytest.raises(UnknownPluginError) as info:
        plugin_manager.get("rollout", "countdwn")
    message = str(info.value)
    assert "no rollout named 'countdwn'" in message
    assert "available: countdown" in message
    assert "Did you mean 'countdown'?" in message
    assert info.value.available == ["countdown"]


# --------------------------------------------------------------------------- options


class OptionsPlugin:
    @hookimpl
    def add_options(self, group):
        group.add_argument("--opts-depth", type=int, default=2, help="how deep")
        group.add_argument("--opts-mode", choices=["a", "b"], default="a")


def test_add_options_groups_options_under_the_plugin_name(plugin_manager):
    plugin_manager.register(OptionsPlugin(), name="opts")
    parser = argparse.ArgumentParser()
    plugin_manager.hooks.add_options(parser)
    assert "opts (plugin options):" in parser.format_help()
    groups = plugin_manager.hooks.add_options(argparse.ArgumentParser())
    assert [o.name for o in groups["opts"].declared] == ["depth", "mode"]
    args = parser.parse_args(["--opts-depth", "5"])
    assert (getattr(args, "opts:depth"), getattr(args, "opts:mode")) == (5, "a")
    assert "--opts-depth DEPTH" in parser.format_help()
    assert "how deep (default: 2)" in parser.format_help()


def test_add_options_only_for_selected_plugins(plugin_manager):
    plugin_manager.register(OptionsPlugin(), name="opts")
    parser = argparse.ArgumentParser()
    plugin_manager.hooks.add_options(parser, plugins=["someone-else"])
    assert "--opts-depth" not in parser.format_help()


def test_add_options_rejects_an_option_without_the_plugin_prefix(plugin_manager):
    class Rude:
        @hookimpl
        def add_options(self, group):
            group.add_argument("--depth", type=int)

    plugin_manager.register(Rude(), name="rude")
    with pytest.raises(PluginError, match=r"option '--depth' of plugin 'rude' must start with "
                                          r"'--rude-'"):
        plugin_manager.hooks.add_options(argparse.ArgumentParser())


# --------------------------------------------------------------------------- observers


@pytest.fixture
def recorders(plugin_manager):
    first, second = Recorder(), Recorder()
    plugin_manager.register(first, name="recorder-1")
    plugin_manager.register(second, name="recorder-2")
    return first, second


def test_on_run_start_reaches_every_observer(plugin_manager, recorders):
    plugin_manager.hooks.on_run_start({"rollout_plugin": "countdown"}, "/runs/x")
    for recorder in recorders:
        assert recorder.calls == [("on_run_start", {"config": {"rollout_plugin": "countdown"},
                                                    "run_dir": "/runs/x"})]


def test_on_samples_passes_the_step_and_its_samples(plugin_manager, recorders):
    samples = [Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[-0.3])]
    plugin_manager.hooks.on_samples(3, samples)
    for recorder in recorders:
        assert recorder.calls == [("on_samples", {"step": 3, "samples": samples})]
        assert recorder.calls[0][1]["samples"][0] is samples[0]


def test_on_step_end_passes_the_metrics(plugin_manager, recorders):
    plugin_manager.hooks.on_step_end(4, {"reward/mean": 0.25})
    for recorder in recorders:
        assert recorder.calls == [("on_step_end", {"step": 4, "metrics": {"reward/mean": 0.25}})]


def test_on_run_end_passes_status_and_error(plugin_manager, recorders):
    plugin_manager.hooks.on_run_end("/runs/x", "failed", "engine died")
    for recorder in recorders:
        assert recorder.calls == [("on_run_end", {"run_dir": "/runs/x", "status": "failed",
                                                  "error": "engine died"})]


def test_observer_hooks_reach_an_unregistered_plugin_no_more(plugin_manager, recorders):
    plugin_manager.unregister("recorder-1")
    plugin_manager.hooks.on_step_end(1, {})
    assert recorders[0].calls == [] and len(recorders[1].calls) == 1


def test_trace_mode_logs_each_hook_call(capsys):
    manager = PluginManager(environ={"ROLLYARD_TRACE_PLUGINS": "1"})
    manager.register(Recorder(), name="recorder")
    manager.hooks.on_step_end(1, {"reward/mean": 1.0})
    err = capsys.readouterr().err
    assert "[rollyard trace] on_step_end -> ['recorder']" in err
    assert "[rollyard trace] on_step_end done" in err


@pytest.mark.parametrize("value", ["", "0"])
def test_trace_mode_off(capsys, value):
    manager = PluginManager(environ={"ROLLYARD_TRACE_PLUGINS": value})
    manager.register(Recorder(), name="recorder")
    manager.hooks.on_step_end(1, {})
    assert "rollyard trace" not in capsys.readouterr().err


# --------------------------------------------------------------------------- bad plugins


class NamelessRollout(Rollout):
    pass


class NotARollout:
    name = "impostor"


def _registering(kind_hook: str, cls: type) -> object:
    class Plugin:
        pass

    def hook(self, register):
        register(cls)

    setattr(Plugin, kind_hook, hookimpl(hook))
    return Plugin()


class WrongSignature:
    @hookimpl
    def register_rollouts(self, register, tokenizer):
        register(CountdownRollout)


class MisspelledHook:
    @hookimpl
    def register_rollout(self, register):
        register(CountdownRollout)


class RaisesInHook:
    @hookimpl
    def register_rewards(self, register):
        raise RuntimeError("reward table missing")


@pytest.mark.parametrize("plugin, expected", [
    (WrongSignature(), r"invalid hook implementation.*register_rollouts.*'tokenizer'"),
    (MisspelledHook(), r"unknown hook\(s\) \['register_rollout'\]; known hooks are \[.*"
                       r"'register_rollouts'"),
    (_registering("register_rollouts", NamelessRollout), r"rollout class NamelessRollout has "
                                                         r"no 'name'"),
    (_registering("register_rollouts", NotARollout), r"not a subclass of rollyard\.Rollout"),
    (RaisesInHook(), r"register_rewards raised RuntimeError: reward table missing"),
], ids=["wrong-signature", "unknown-hook", "no-name", "wrong-base", "hook-raises"])
def test_bad_plugin_is_reported_and_the_others_still_work(plugin_manager, plugin, expected):
    plugin_manager.register(EverythingPlugin(), name="good")
    with pytest.warns(PluginWarning, match="rollyard plugin 'bad'"):
        record = plugin_manager.register(plugin, name="bad", distribution="bad-dist")
    assert len(record.errors) == 1
    assert re.search(expected, record.errors[0], re.S), record.errors[0]
    assert "distribution 'bad-dist'" in record.errors[0]
    assert "entry point 'bad (in-process)'" in record.errors[0]
    assert record.registers == {}
    assert plugin_manager.get("rollout", "countdown") is CountdownRollout
    assert sorted(plugin_manager.records) == ["bad", "good"]


def test_a_name_two_distributions_register_is_refused_plain_and_taken_qualified(
        plugin_manager):
    plugin_manager.register(EverythingPlugin(), name="first", distribution="dist-one")
    record = plugin_manager.register(_registering("register_rollouts", CountdownRollout),
                                     name="second", distribution="dist-two")
    assert record.errors == []
    with pytest.raises(PluginError, match="rollout name 'countdown' is registered by several "
                                          "distributions; say which: dist-one:countdown or "
                                          "dist-two:countdown"):
        plugin_manager.get("rollout", "countdown")
    assert plugin_manager.get("rollout", "dist-two:countdown").name == "dist-two:countdown"
    assert issubclass(plugin_manager.get("rollout", "dist-one:countdown"), CountdownRollout)
    assert plugin_manager.owner("rollout", "dist-one:countdown").name == "first"


# --------------------------------------------------------------------------- entry points

GOOD_MODULE = """
from rollyard import Rollout, hookimpl

CALLS = []

class Shapes(Rollout):
    name = "shapes"

@hookimpl
def register_rollouts(register):
    register(Shapes)

@hookimpl
def on_step_end(step, metrics):
    CALLS.append(step)
"""

TWIN_MODULE = """
from rollyard import Reward, hookimpl

class Twin(Reward):
    name = "twin"

@hookimpl
def register_rewards(register):
    register(Twin)
"""


def test_entry_point_whose_import_raises_is_reported(make_distribution):
    make_distribution("rollyard-shapes", {"ry_shapes.py": GOOD_MODULE}, {"shapes": "ry_shapes"})
    make_distribution("rollyard-broken", {"ry_broken.py": "raise ImportError('no libfoo')\n"},
                      {"broken": "ry_broken"})
    manager = PluginManager(environ={"ROLLYARD_LOAD_PLUGINS": "shapes,broken,toy"})
    with pytest.warns(PluginWarning, match="rollyard plugin 'broken'"):
        manager.load_all()
    broken = manager.records["broken"]
    assert broken.errors == ["importing 'ry_broken' raised ImportError: no libfoo "
                             "(distribution 'rollyard-broken', entry point 'ry_broken')"]
    assert broken.distribution == "rollyard-broken" and broken.version == "1.0"
    assert manager.records["shapes"].errors == [] and manager.records["toy"].errors == []
    assert manager.names("rollout") == ["shapes", "toy"]
    manager.hooks.on_step_end(7, {})
    assert sys.modules["ry_shapes"].CALLS == [7]


def test_duplicate_name_across_two_distributions(make_distribution):
    make_distribution("rollyard-twin-a", {"ry_twin_a.py": TWIN_MODULE}, {"twin-a": "ry_twin_a"})
    make_distribution("rollyard-twin-b", {"ry_twin_b.py": TWIN_MODULE}, {"twin-b": "ry_twin_b"})
    make_distribution("rollyard-shapes", {"ry_shapes.py": GOOD_MODULE}, {"shapes": "ry_shapes"})
    manager = PluginManager(environ={"ROLLYARD_LOAD_PLUGINS": "twin-a,twin-b,shapes"})
    manager.load_all()
    assert manager.records["twin-b"].errors == []
    assert manager.owner("reward", "rollyard-twin-a:twin").distribution == "rollyard-twin-a"
    assert manager.owner("reward", "rollyard-twin-b:twin").distribution == "rollyard-twin-b"
    with pytest.raises(PluginError, match="rollyard-twin-a:twin or rollyard-twin-b:twin"):
        manager.get("reward", "twin")
    assert manager.names("rollout") == ["shapes"]


GUESS_MODULE = """
from dataclasses import dataclass
from rollyard import Rollout, hookimpl
from rollyard.options import option

@dataclass(frozen=True)
class Mine:
    colour: str = option("red", help="the colour")

class MyGuess(Rollout):
    name = "guess"
    Options = Mine

@hookimpl
def register_rollouts(register):
    register(MyGuess)
"""


def test_a_third_party_plugin_takes_a_name_from_a_builtin_example(make_distribution, capsys):
    from rollyard_plugins.guess import Guess

    make_distribution("rollyard-guess", {"my_guess.py": GUESS_MODULE}, {"guess": "my_guess"})
    manager = PluginManager(environ={})
    manager.load_all()
    assert manager.get("rollout", "guess").__module__ == "my_guess"
    builtin = manager.get("rollout", "rollyard:guess")
    assert issubclass(builtin, Guess) and builtin.name == "rollyard:guess"
    assert manager.get("rollout", "rollyard-guess:guess").__module__ == "my_guess"
    # both entry points named 'guess' load: the second under its qualified name
    assert manager.records["rollyard-guess:guess"].distribution == "rollyard-guess"
    assert manager.records["guess"].distribution == "rollyard"
    err = capsys.readouterr().err
    assert err.count("rollout 'guess' of 'rollyard-guess' takes the name of the core's built-in "
                     "example, which stays available as 'rollyard:guess'") == 1
    # each keeps its own options: the plain flags for the plugin with the plain name
    tables = manager.option_tables()
    assert tables.typed["guess"].options_cls.__module__ == "my_guess"
    assert tables.typed["rollyard-guess"].options_cls is Guess.Options


def test_allow_list_loads_only_the_named_entry_points(make_distribution):
    make_distribution("rollyard-shapes", {"ry_shapes.py": GOOD_MODULE}, {"shapes": "ry_shapes"})
    manager = PluginManager(environ={"ROLLYARD_LOAD_PLUGINS": " shapes , basic-rewards"})
    manager.load_all()
    assert sorted(manager.records) == ["basic-rewards", "shapes"]


def test_block_list_skips_the_named_entry_points(make_distribution):
    make_distribution("rollyard-shapes", {"ry_shapes.py": GOOD_MODULE}, {"shapes": "ry_shapes"})
    manager = PluginManager(environ={"ROLLYARD_DISABLE_PLUGINS": "shapes,toy"})
    manager.load_all()
    assert "shapes" not in manager.records and "toy" not in manager.records
    assert "ry_shapes" not in sys.modules
    assert {"basic-rewards", "console", "jsonl"} <= set(manager.records)


def test_block_list_wins_over_allow_list(make_distribution):
    make_distribution("rollyard-shapes", {"ry_shapes.py": GOOD_MODULE}, {"shapes": "ry_shapes"})
    manager = PluginManager(environ={"ROLLYARD_LOAD_PLUGINS": "shapes,toy",
                                     "ROLLYARD_DISABLE_PLUGINS": "shapes"})
    manager.load_all()
    assert sorted(manager.records) == ["toy"]


def test_load_for_run_leaves_unrelated_plugins_unimported(make_distribution):
    make_distribution("rollyard-shapes", {"ry_shapes.py": GOOD_MODULE}, {"shapes": "ry_shapes"})
    make_distribution("rollyard-twin-a", {"ry_twin_a.py": TWIN_MODULE}, {"twin-a": "ry_twin_a"})
    manager = PluginManager(environ={})
    manager.load_for_run([("rollout", "shapes"), ("reward", "exact-match")])
    assert "ry_shapes" in sys.modules and "ry_twin_a" not in sys.modules
    assert manager.get("rollout", "shapes").__module__ == "ry_shapes"
    assert {"toy", "basic-rewards"} <= set(manager.records)  # the core's own plugins


def test_load_for_run_falls_back_to_every_plugin_for_a_name_it_cannot_place(make_distribution):
    make_distribution("rollyard-twin-a", {"ry_twin_a.py": TWIN_MODULE}, {"twin-a": "ry_twin_a"})
    manager = PluginManager(environ={"ROLLYARD_LOAD_PLUGINS": "twin-a,toy"})
    manager.load_for_run([("reward", "twin")])  # registered by entry point 'twin-a'
    assert manager.get("reward", "twin").__module__ == "ry_twin_a"


def test_entry_point_name_taken_by_two_distributions(make_distribution):
    make_distribution("rollyard-shapes", {"ry_shapes.py": GOOD_MODULE}, {"shapes": "ry_shapes"})
    make_distribution("rollyard-other", {"ry_other.py": TWIN_MODULE}, {"shapes": "ry_other"})
    manager = PluginManager(environ={"ROLLYARD_LOAD_PLUGINS": "shapes"})
    manager.load_for_run([("rollout", "nothing-has-this")])  # loads twice: named, then all
    first = manager.records["shapes"]  # whichever distribution was found first
    other = {"rollyard-shapes": "rollyard-other",
             "rollyard-other": "rollyard-shapes"}[first.distribution]
    second = manager.records[f"{other}:shapes"]
    assert first.errors == second.errors == []
    assert manager.get("rollout", "shapes").__module__ == "ry_shapes"
    assert manager.get("reward", "twin").__module__ == "ry_other"




def test_a_qualified_name_always_reaches_its_distribution_plugin():
    manager = PluginManager(environ={})
    manager.load_all()
    assert manager.get("rollout", "rollyard:toy") is manager.get("rollout", "toy")
    assert manager.owner("reward", "rollyard:exact-match").name == "basic-rewards"
    with pytest.raises(UnknownPluginError, match="no rollout named 'elsewhere:toy'"):
        manager.get("rollout", "elsewhere:toy")
