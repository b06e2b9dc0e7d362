"""The conformance check (rollyard.testing): it passes on plugins that keep the contract and
fails with a message naming the plugin, the task and the field on plugins that do not."""

from __future__ import annotations

import asyncio
import importlib
import json
import random
import re
import subprocess
import sys
import textwrap
import types
import uuid
from pathlib import Path

import pytest
from rollyard import (
    EngineAborted,
    GenerateRequest,
    GenerateResult,
    Reward,
    Rollout,
    RolloutContext,
    Sample,
    SampleStatus,
    SamplingParams,
    Task,
    TransportError,
    hookimpl,
)
from rollyard.testing import ScriptedTransport, check_plugin, check_rollout

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_SRC = ROOT / "core" / "rollyard" / "templates" / "rollyard-plugin" / "src"


# --------------------------------------------------------------------------- plugins under test


class Words(Rollout):
    """A plugin that keeps the contract: text prompts, single turn through the transport."""

    name = "words"
    default_rewards = {"exact-match": 1.0}

    def tasks(self, split):
        start = 0 if split == "train" else 8
        count = self.context.options.get("count", 8 if split == "train" else 2)
        return [Task(id=f"w-{i}", prompt=f"say w{i}", data={"answer": f"w{i}"})
                for i in range(start, start + count)]

    async def run_group(self, task, n):
        from rollyard.episodes import sample_single_turn

        return await sample_single_turn(self.context, task, n)


def plugin_of(*rollouts: type, rewards: tuple[type, ...] = (), option: str | None = None):
    """A plugin object registering ``rollouts`` and ``rewards``, and one option if given."""

    @hookimpl
    def register_rollouts(register):
        for cls in rollouts:
            register(cls)

    @hookimpl
    def register_rewards(register):
        for cls in rewards:
            register(cls)

    @hookimpl
    def add_options(group):
        group.add_argument(option, type=int, default=8)

    hooks = {"register_rollouts": register_rollouts, "register_rewards": register_rewards}
    if option:
        hooks["add_options"] = add_options
    module = types.ModuleType("broken_plugin")
    vars(module).update(hooks)
    return module


@pytest.fixture
def check(rollyard_tokenizer):
    """check(Rollout subclass, ...) -> the report for a plugin named 'broken' holding it."""

    def run(*rollouts: type, **kwargs):
        plugin = plugin_of(*rollouts, rewards=kwargs.pop("rewards", ()),
                           option=kwargs.pop("option", None))
        return check_plugin(plugin, name="broken", tokenizer=rollyard_tokenizer, **kwargs)

    return run


def failure(report, check: str) -> str:
    """The message of the one failed check whose name ends with ``check``; every failed
    check says what to change."""
    failed = [r for r in report.failures if r.check.endswith(check)]
    assert len(failed) == 1, report.format()
    assert not report.ok
    assert all(r.fix for r in report.failures), report.format()
    assert f"        fix: {failed[0].fix}" in report.format()
    return failed[0].message


# --------------------------------------------------------------------------- passing plugins


def test_standard_toy_plugin_passes_every_check(rollyard_tokenizer):
    report = check_plugin("toy", tokenizer=rollyard_tokenizer)
    assert report.ok, report.format()
    outcomes = {r.check: r.outcome for r in report.results}
    assert set(outcomes.values()) == {"pass"}
    assert {"registration", "options", "rollout 'toy': tasks('train')",
            "rollout 'toy': task ids across splits", "rollout 'toy': samples (train)",
            "rollout 'toy': default rewards (train)", "rollout 'toy': engine abort",
            "rollout 'toy': transport error"} <= set(outcomes)
    assert "declares --toy-operation, --toy-num-tasks" in report.format()


def test_plugin_options_reach_the_rollout(rollyard_tokenizer):
    report = check_plugin("toy", argv=["--toy-num-tasks", "10"], tokenizer=rollyard_tokenizer)
    assert "8 tasks with unique ids" in report.format()
    report = check_plugin("toy", options={"num_tasks": 20}, tokenizer=rollyard_tokenizer)
    assert "16 tasks with unique ids" in report.format()


def test_plugin_template_passes_every_check(rollyard_tokenizer, monkeypatch):
    monkeypatch.syspath_prepend(str(TEMPLATE_SRC))
    try:
        plugin = importlib.import_module("rollyard_myenv.plugin")
        report = check_plugin(plugin, name="myenv", tokenizer=rollyard_tokenizer)
    finally:
        for module in [m for m in sys.modules if m.startswith("rollyard_myenv")]:
            del sys.modules[module]
    assert report.ok, report.format()
    assert "myenv-sorted" in report.format()
    assert all(r.outcome == "pass" for r in report.results)


def test_a_well_behaved_in_process_plugin_passes(check):
    report = check(Words)
    assert report.ok, report.format()


def test_scripted_replies_reach_the_rewards(check):
    report = check(Words, replies=["w0"])
    assert report.ok, report.format()
    assert "scored task 'w-0': rewards [1.0, 1.0, 1.0]" in report.format()


# --------------------------------------------------------------------------- broken plugins


def test_duplicate_task_ids_are_named(check):
    class Duplicates(Words):
        def tasks(self, split):
            tasks = super().tasks(split)
            return [*tasks, tasks[1]]

    message = failure(check(Duplicates), "tasks('train')")
    assert message == "plugin 'broken', rollout 'words': tasks('train'): task id 'w-1' " \
                      "appears 2 times"


def test_empty_split_is_named(check):
    class NoEval(Words):
        def tasks(self, split):
            return super().tasks(split) if split == "train" else []

    message = failure(check(NoEval), "tasks('eval')")
    assert "plugin 'broken', rollout 'words': tasks('eval'): the 'eval' split is empty" in message


class Overlap(Words):
    """An eval split that repeats a training task (the same dataset scored separately)."""

    def tasks(self, split):
        return [*super().tasks(split), Task(id="w-0", prompt="say w0")] \
            if split == "eval" else super().tasks(split)


def test_splits_may_share_task_ids_unless_the_eval_split_is_held_out(check):
    report = check(Overlap)
    assert report.ok, report.format()
    [result] = [r for r in report.results if r.check.endswith("task ids across splits")]
    assert result.message == ("1 task id(s) are in both 'train' and 'eval', e.g. ['w-0']: "
                              "allowed, the rollout does not declare eval_held_out = True")


def test_a_held_out_eval_split_sharing_task_ids_is_named(check):
    class HeldOut(Overlap):
        eval_held_out = True

    message = failure(check(HeldOut), "task ids across splits")
    assert message == ("plugin 'broken', rollout 'words': 1 task id(s) are in both 'train' "
                       "and 'eval', e.g. ['w-0'], but it declares eval_held_out = True")


def test_nondeterministic_tasks_are_named(check):
    class RandomIds(Words):
        def __init__(self, context):
            super().__init__(context)
            self.tag = uuid.uuid4().hex[:6]  # differs from run to run: resuming breaks

        def tasks(self, split):
            return [Task(f"{self.tag}-{t.id}", t.prompt, t.data) for t in super().tasks(split)]

    message = failure(check(RandomIds), "tasks are deterministic")
    assert "differ between two constructions with the same seed: index 0 (task " in message
    assert "field 'id' is" in message


def test_malformed_prompt_names_the_task_and_field(check):
    class BadPrompt(Words):
        def tasks(self, split):
            return [*super().tasks(split), Task(id=f"{split}-x", prompt=[{"text": "hi"}])]

    message = failure(check(BadPrompt), "tasks('train')")
    assert "task 'train-x': field 'prompt'" in message


def test_malformed_samples_name_the_task_and_field(check):
    class ShortLogprobs(Words):
        async def run_group(self, task, n):
            samples = await super().run_group(task, n)
            samples[0].logprobs = samples[0].logprobs[:-1]
            return samples

    report = check(ShortLogprobs)
    message = failure(report, "samples (train)")
    assert message.startswith("plugin 'broken', rollout 'words', task 'w-0': rollout 'words': "
                              "invalid sample for task 'w-0': field 'logprobs': has 3 entries "
                              "for 4 response tokens")


def test_samples_that_are_not_samples_are_named(check):
    class Dicts(Words):
        async def run_group(self, task, n):
            return [{"tokens": [1, 2]} for _ in range(n)]

    assert "rollout 'words' returned dict, not a Sample" in failure(check(Dicts), "(train)")


def test_too_few_samples_and_missing_group_id_are_named(check):
    class Lossy(Words):
        async def run_group(self, task, n):
            samples = (await super().run_group(task, n))[:-1]
            samples[0].group_id = ""
            return samples

    message = failure(check(Lossy), "samples (train)")
    assert "returned 2 samples for 3 episodes" in message
    assert "sample 0: field 'group_id' is empty" in message


def test_raising_run_group_is_named(check):
    class Raises(Words):
        async def run_group(self, task, n):
            raise RuntimeError(f"no engine for {task.id}")

    report = check(Raises)
    message = failure(report, "run_group (train)")
    assert message == ("plugin 'broken', rollout 'words', task 'w-0': run_group(task, 3) raised "
                       "RuntimeError: no engine for w-0")
    assert not any(r.check.endswith("engine abort") for r in report.results)


def test_hanging_run_group_times_out(check):
    class Hangs(Words):
        async def run_group(self, task, n):
            await asyncio.sleep(60)

    message = failure(check(Hangs, timeout_s=0.2), "run_group (train)")
    assert "run_group(task, 3) did not return within 0.2s" in message


def test_engine_abort_that_escapes_run_group_is_named(check):
    class Unguarded(Words):
        async def run_group(self, task, n):
            results = [await self.context.transport.generate(GenerateRequest([1, 2]))
                       for _ in range(n)]
            return [Sample(tokens=[1, 2, *r.output_ids], prompt_len=2,
                           loss_mask=[1] * len(r.output_ids), logprobs=r.logprobs,
                           group_id="g") for r in results]

    report = check(Unguarded)
    assert "run_group(task, 3) raised EngineAborted: scripted engine abort [engine " \
           "scripted://engine] instead of returning aborted/failed samples" in \
        failure(report, "engine abort")
    assert "raised TransportError" in failure(report, "transport error")


def test_failed_generations_reported_as_completed_are_named(check):
    class Optimist(Words):
        async def run_group(self, task, n):
            samples = await super().run_group(task, n)
            for s in samples:
                s.status = SampleStatus.COMPLETED
            return samples

    message = failure(check(Optimist), "engine abort")
    assert "sample 0: field 'status' is 'completed' though every generation failed" in message


def test_missing_default_reward_is_named(check):
    class Unknown(Words):
        default_rewards = {"no-such-reward": 1.0}

    message = failure(check(Unknown), "default rewards")
    assert "default reward(s) ['no-such-reward'] are not registered" in message


def test_raising_reward_is_named(check):
    class Picky(Reward):
        name = "picky"

        async def score(self, sample, task):
            raise KeyError("answer")

    class UsesPicky(Words):
        default_rewards = {"picky": 1.0}

    message = failure(check(UsesPicky, rewards=(Picky,)), "default rewards (train)")
    assert "task 'w-0'" in message and "reward 'picky' raised KeyError('answer')" in message


def test_unprefixed_option_is_named(check):
    message = failure(check(Words, option="--count"), "options")
    assert "option '--count' of plugin 'broken' must start with '--broken-'" in message


def test_option_values_are_parsed_with_the_plugins_types(check):
    report = check(Words, option="--broken-count", argv=["--broken-count", "3"])
    assert report.ok, report.format()
    assert "3 tasks with unique ids" in report.format()


def test_registration_errors_are_named(check):
    class Nameless(Words):
        name = ""

    class NotARollout:
        name = "plain"

    message = failure(check(Nameless), "registration")
    assert "plugin 'broken': rollout class" in message and "Nameless has no 'name'" in message
    message = failure(check(NotARollout), "registration")
    assert "NotARollout'> as a rollout, but it is not a subclass of rollyard.Rollout" in message


def test_rollout_that_cannot_be_built_with_its_options_is_named(check):
    class NeedsFile(Words):
        name = "needs-file"

        def __init__(self, context):
            super().__init__(context)
            raise FileNotFoundError("tasks.json")

    message = failure(check(NeedsFile), "construct")
    assert message.startswith("plugin 'broken', rollout 'needs-file': building it with options "
                              "{} raised FileNotFoundError: tasks.json")


def test_option_values_that_fail_their_check_are_named(rollyard_tokenizer, capsys):
    report = check_plugin("toy", argv=["--toy-num-tasks", "1"], tokenizer=rollyard_tokenizer)
    assert "`rollyard train --toy-num-tasks 1` does not parse" in failure(report, "options")
    assert "--toy-num-tasks: 1: choose 2..775" in capsys.readouterr().err


def test_option_values_that_do_not_parse_are_named(rollyard_tokenizer, capsys):
    report = check_plugin("toy", argv=["--toy-operation", "rotate"],
                          tokenizer=rollyard_tokenizer)
    assert "`rollyard train --toy-operation rotate` does not parse" in failure(report, "options")
    assert "--toy-operation: 'rotate': choose one of" in capsys.readouterr().err


def test_unknown_entry_point_lists_installed_plugins():
    report = check_plugin("no-such-plugin")
    message = failure(report, "registration")
    assert "no entry point named 'no-such-plugin'" in message and "toy" in message


def test_a_module_needs_its_plugin_name():
    with pytest.raises(ValueError, match="needs name="):
        check_plugin(plugin_of(Words))


def test_check_rollout_checks_one_class(rollyard_tokenizer):
    report = check_rollout(Words, tokenizer=rollyard_tokenizer, plugin="words-only")
    assert report.ok, report.format()
    assert report.plugin == "words-only"


# --------------------------------------------------------------------------- the scripted engine


def request(ids, max_new_tokens=8, stop=(2,)):
    return GenerateRequest(ids, SamplingParams(max_new_tokens=max_new_tokens,
                                               stop_token_ids=list(stop)))


def test_scripted_transport_follows_its_script(rollyard_tokenizer):
    fixed = GenerateResult([7], [-1.0], "stop", weight_version=4)
    transport = ScriptedTransport(["hi", [5, 6, 7], EngineAborted("gone"), fixed,
                                  lambda req: req.input_ids[:1]], tokenizer=rollyard_tokenizer,
                                  logprob=-0.25)

    async def replies():
        out = [await transport.generate(request([1, 2])) for _ in range(2)]
        with pytest.raises(EngineAborted, match="gone"):
            await transport.generate(request([1, 2]))
        out += [await transport.generate(request([3, 4])) for _ in range(3)]
        return out

    hi, listed, scripted, called, again = asyncio.run(replies())
    # like the real engine, output_ids end with the stop token that ended the reply
    assert rollyard_tokenizer.decode(hi.output_ids) == "hi<|im_end|>"
    assert hi.logprobs == [-0.25] * len(hi.output_ids) and hi.finish_reason == "stop"
    assert listed.output_ids == [5, 6, 7, 2]
    assert scripted is fixed
    assert called.output_ids == [3, 2]
    assert rollyard_tokenizer.decode(again.output_ids) == "hi<|im_end|>"  # the script cycles
    assert len(transport.requests) == 6
    assert [result for _, result in transport.calls] == [hi, listed, scripted, called, again]


def test_scripted_transport_stops_at_a_stop_token_and_falls_back_to_eos(rollyard_tokenizer):
    transport = ScriptedTransport([[5, 2, 6], [5, 6]], tokenizer=rollyard_tokenizer,
                                  logprob=lambda i: -0.1 * (i + 1))
    stopped = asyncio.run(transport.generate(request([1], stop=(2,))))
    assert (stopped.output_ids, stopped.finish_reason) == ([5, 2], "stop")
    assert stopped.logprobs == pytest.approx([-0.1, -0.2])
    no_stop_ids = asyncio.run(transport.generate(request([1], stop=())))
    assert no_stop_ids.output_ids == [5, 6, rollyard_tokenizer.eos_token_id]
    cut = asyncio.run(transport.generate(request([1], max_new_tokens=1)))  # [5, 2, 6] again
    assert (cut.output_ids, cut.finish_reason) == ([5], "length")


def test_scripted_transport_scripts_each_session_from_its_start(rollyard_tokenizer):
    transport = ScriptedTransport(["a", "b"], tokenizer=rollyard_tokenizer, per_session=True)

    def ask(session):
        req = GenerateRequest([1], SamplingParams(stop_token_ids=[2]), session_id=session)
        return rollyard_tokenizer.decode(asyncio.run(transport.generate(req)).output_ids,
                                         skip_special_tokens=True)

    assert [ask("g/0"), ask("g/1"), ask("g/0"), ask("g/1"), ask("g/0")] == \
        ["a", "a", "b", "b", "a"]


def test_scripted_transport_default_reply_and_limits():
    transport = ScriptedTransport()
    echo = asyncio.run(transport.generate(request([9, 8, 7, 6])))
    assert (echo.output_ids, echo.finish_reason) == ([8, 7, 6, 2], "stop")
    cut = asyncio.run(transport.generate(request([9, 8, 7, 6], max_new_tokens=2)))
    assert (cut.output_ids, cut.finish_reason) == ([8, 7], "length")


@pytest.mark.parametrize("bad, problem", [
    (request([]), "input_ids must be a non-empty list"),
    (request([1, 600]), r"input_ids\[1\] = 600 is not a token id of the vocabulary \(size 512"),
    (request([1, -1]), r"input_ids\[1\] = -1"),
    (request([1], max_new_tokens=0), "max_new_tokens = 0"),
])
def test_scripted_transport_rejects_what_an_engine_would(rollyard_tokenizer, bad, problem):
    transport = ScriptedTransport(tokenizer=rollyard_tokenizer)
    with pytest.raises(TransportError, match=problem):
        asyncio.run(transport.generate(bad))


def test_scripted_transport_fixture_is_a_factory(scripted_transport, rollyard_tokenizer):
    transport = scripted_transport(["ok"], tokenizer=rollyard_tokenizer)
    context = RolloutContext({"seed": 0}, rollyard_tokenizer, transport, None, {},
                             random.Random(0))
    samples = asyncio.run(Words(context).run_group(Task("t", "say ok"), 2))
    assert [s.metadata["completion"] for s in samples] == ["ok", "ok"]


def test_manager_fixture_unregisters_nothing_leaks(rollyard_manager):
    record = rollyard_manager.register(plugin_of(Words), name="words")
    assert record.errors == [] and rollyard_manager.names("rollout") == ["words"]


# --------------------------------------------------------------------------- faces


def test_testing_package_imports_nothing_heavy():
    code = ("import sys, rollyard.testing, rollyard.testing.pytest_plugin; "
            "print([m for m in ('torch', 'ray', 'transformers', 'megatron') if m in sys.modules])")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.slow
def test_check_plugin_command_prints_the_report(rollyard_cli, make_distribution):
    ok = rollyard_cli("check-plugin", "--json", "toy", "--toy-num-tasks", "10")
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["ok"] and report["plugin"] == "toy"
    assert {"check": "rollout 'toy': tasks('train')", "outcome": "pass",
            "message": "8 tasks with unique ids"} in report["results"]
    site = make_distribution("rollyard-dupes", modules={"dupes_plugin.py": textwrap.dedent("""
        from rollyard import Rollout, Task, hookimpl

        class Dupes(Rollout):
            name = "dupes"

            def tasks(self, split):
                return [Task(id="same", prompt="hi"), Task(id="same", prompt="ho")]

            async def run_group(self, task, n):
                return []

        @hookimpl
        def register_rollouts(register):
            register(Dupes)
        """)}, entry_points={"dupes": "dupes_plugin"})
    failed = rollyard_cli("check-plugin", "dupes", paths=[site])
    assert failed.returncode == 1, failed.stderr
    assert "FAIL  rollout 'dupes': tasks('train'): plugin 'dupes', rollout 'dupes': " \
           "tasks('train'): task id 'same' appears 2 times\n        fix: return, for each " \
           "split, a non-empty list of rollyard.Task" in failed.stdout
    assert failed.stdout.rstrip().endswith("failed, 0 skipped")


@pytest.mark.slow
def test_conformance_fixture_fails_the_test_with_the_report(tmp_path):
    (tmp_path / "test_uses_fixture.py").write_text(textwrap.dedent("""
        import sys
        from rollyard import Rollout, Task, hookimpl

        class Empty(Rollout):
            name = "empty"

            def tasks(self, split):
                return []

            async def run_group(self, task, n):
                return []

        @hookimpl
        def register_rollouts(register):
            register(Empty)

        def test_toy(rollyard_conformance):
            assert rollyard_conformance("toy").ok

        def test_empty(rollyard_conformance):
            rollyard_conformance(sys.modules[__name__], name="empty")
        """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             str(tmp_path)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert "1 failed, 1 passed" in result.stdout, result.stdout + result.stderr
    assert "rollyard conformance of plugin 'empty'" in result.stdout
    assert "tasks('train'): the 'train' split is empty" in result.stdout


@pytest.mark.slow
def test_testing_section_of_the_tutorial_runs(tmp_path):
    """The code of "Testing your plugin" runs against the tutorial's own package."""
    text = (ROOT / "docs" / "writing-plugins.md").read_text()
    package = dict(re.findall(r"^```\w*\n# file: (\S+)\n(.*?)^```", text, re.M | re.S))
    snippet, tests = re.findall(r"^```python\n(.*?)^```",
                                text[text.index("## Testing your plugin"):], re.M | re.S)
    for relative, source in {**package, "tests/test_kit.py": tests,
                             "snippet.py": snippet}.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(source)
    (tmp_path / "src/rollyard_arith/__init__.py").write_text("")
    env = {"PYTHONPATH": str(tmp_path / "src"), "PATH": "/usr/bin:/bin"}
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    result = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env=env)
    assert result.returncode == 0 and "11 passed" in result.stdout, result.stdout
    result = subprocess.run([sys.executable, "snippet.py"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, env=env)
    assert result.stdout.rstrip().endswith("OK: 16 passed, 0 failed, 0 skipped"), result.stderr
