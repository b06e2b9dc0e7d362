"""What a person sees when a run fails. Through the CLI: a rollout that cannot be built or has
no eval tasks fails in the preflight, before Ray, the engines and the run folder, in one
``error:`` line (the traceback with ``--debug``); a rollout that fails mid-run inside its Ray
worker stops the run with the plugin's own message in one line, and keeps the run folder with
the traceback in its log (the plugins are a throwaway distribution on PYTHONPATH). In
process: the preflight's transport and empty training split, and Ray's wrappers unwrapped."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from pathlib import Path

import pytest
from rollyard import hookimpl
from rollyard.config import RunConfig
from rollyard.errors import ConfigError, PluginError, describe_error
from rollyard.run.driver import PluginSelection
from rollyard.run.preflight import TaskCounts, count_tasks
from rollyard.train_flags import TrainFlags
from rollyard.types import GenerateRequest
from rollyard_plugins.toy import StringOperationRollout, ToyOptions

PLUGIN = '''
import os

from rollyard import hookimpl
from rollyard_plugins.toy import StringOperationRollout


class Broken(StringOperationRollout):
    name = "broken"

    def __init__(self, context):
        raise ValueError("the judge model is not configured:\\nset JUDGE_URL")


class NoEval(StringOperationRollout):
    name = "no-eval"

    def tasks(self, split):
        return super().tasks(split) if split == "train" else []


class Flaky(StringOperationRollout):
    """Its groups work until the file FLAKY_AFTER names exists; then run_group raises."""

    name = "flaky"

    async def run_group(self, task, n):
        marker = os.environ["FLAKY_AFTER"]
        if os.path.exists(marker):
            raise ConnectionError(f"judge at {marker} went away")
        samples = await super().run_group(task, n)
        open(marker, "w").close()
        return samples


@hookimpl
def register_rollouts(register):
    for cls in (Broken, NoEval, Flaky):
        register(cls)
'''

ANSI = re.compile(r"\x1b\[")


@pytest.fixture
def site(make_distribution) -> Path:
    return make_distribution("rollyard-failing-test", {"rollyard_failing.py": PLUGIN},
                             {"failing": "rollyard_failing"})


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def train(rollyard_cli, site: Path, runs: Path, model: Path, *args: str, env=None):
    return rollyard_cli("train", "--model", str(model), "--runs-dir", str(runs),
                        "--no-progress", *args, paths=[site], env=env, timeout=300)


def test_the_preflight_refuses_a_rollout_without_eval_tasks_before_ray_in_one_line(
        rollyard_cli, site, tiny_model_dir, tmp_path) -> None:
    runs = tmp_path / "runs"
    result = train(rollyard_cli, site, runs, tiny_model_dir, "--rollout-plugin", "no-eval",
                   "--eval-interval", "1")
    assert result.returncode == 1
    assert error_lines(result.stderr) == [
        "error: --eval-interval 1: rollout 'no-eval' has no eval tasks (its tasks('eval') is "
        "empty); choose a rollout with an eval split"], result.stderr
    assert "Traceback" not in result.stderr and not ANSI.search(result.stderr)
    assert "ray" not in result.stderr.lower()  # Ray never started
    assert not runs.exists()  # no run folder


def test_a_rollout_raising_in_its_constructor_is_refused_and_debug_adds_the_traceback(
        rollyard_cli, site, tiny_model_dir, tmp_path) -> None:
    runs = tmp_path / "runs"
    result = train(rollyard_cli, site, runs, tiny_model_dir, "--rollout-plugin", "broken",
                   "--debug")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        "error: rollout 'broken' failed to build: ValueError: the judge model is not "
        "configured: set JUDGE_URL")
    assert len(error_lines(result.stderr)) == 1
    before = result.stderr.split("error: rollout 'broken'")[0]
    assert "Traceback (most recent call last)" in before  # --debug: the traceback first
    assert 'raise ValueError("the judge model is not configured' in before
    assert "ray" not in result.stderr.lower()
    assert not runs.exists()


@pytest.mark.slow
def test_a_rollout_failing_mid_run_in_its_ray_worker_is_one_line_and_keeps_the_run(
        rollyard_cli, site, tiny_model_dir, tmp_path) -> None:
    """Step 1 trains; from step 2 the rollout's run_group raises inside its Ray worker, every
    sample fails and the run stops at the failure threshold."""
    runs = tmp_path / "runs"
    marker = tmp_path / "judge"
    result = train(rollyard_cli, site, runs, tiny_model_dir, "--rollout-plugin", "flaky",
                   "--steps", "2", "--groups-per-step", "1", "--group-size", "2",
                   "--max-new-tokens", "4", "--keep-zero-variance-groups", "--num-cpus", "2",
                   "--weight-sync", "disk", "--name", "flaky-run",
                   env={"FLAKY_AFTER": str(marker)})
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    run = runs / "flaky-run"
    [line] = error_lines(result.stderr)
    assert line == (f"error: step 2: 100% of samples failed or aborted (threshold 50%); most "
                    f"common: 2x rollout 'flaky' raised ConnectionError: judge at {marker} "
                    f"went away (traceback in {run / 'log.txt'})"), result.stderr
    assert not ANSI.search(result.stderr) and "Traceback" not in result.stderr
    assert result.stdout.count("went away") == 0  # the console does not repeat it
    assert f"run failed: {run}" in " ".join(result.stdout.split())
    steps = [json.loads(row)["step"] for row in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1]
    log = (run / "log.txt").read_text()
    assert "Traceback (most recent call last)" in log and "TooManyFailures" in log


def test_describe_error_unwraps_what_a_ray_actor_raised() -> None:
    """Ray's own wrappers, built as Ray builds them for a method and for a constructor that
    raised; the remote traceback is coloured, as Ray colours it."""
    from ray.exceptions import ActorDiedError, RayTaskError

    try:
        raise ValueError("bad --vf-env 'nope': no such environment")
    except ValueError as exc:
        cause = exc
    remote = "\x1b[36mray::RolloutWorker.collect()\x1b[39m\nTraceback...\nValueError: bad"
    wrapped = RayTaskError("collect", remote, cause).as_instanceof_cause()
    assert describe_error(wrapped) == "ValueError: bad --vf-env 'nope': no such environment"
    init_remote = remote.replace("collect()", "__init__()") + " --vf-env 'nope'"
    init = RayTaskError("RolloutWorker.__init__", init_remote, cause)
    assert describe_error(ActorDiedError(init)) == (
        "RolloutWorker failed to start: ValueError: bad --vf-env 'nope'")


def test_a_rollout_calling_the_engines_while_it_is_built_is_told_why_it_cannot(
        tiny_model_dir) -> None:
    """The preflight's transport: no engine runs yet, so the call fails and says so."""

    class WarmsUp(StringOperationRollout):
        name = "warms-up"

        def __init__(self, context):
            super().__init__(context)
            asyncio.run(context.transport.generate(GenerateRequest(input_ids=[1])))

    with pytest.raises(PluginError) as raised:
        count_tasks(WarmsUp, ToyOptions(), RunConfig(), tiny_model_dir, ["train"])
    assert str(raised.value) == (
        "rollout 'warms-up' failed to build: transport.generate() was called while the "
        "rollout was being built or listing its tasks, before any engine runs; send requests "
        "from run_group")
    counts = count_tasks(StringOperationRollout, ToyOptions(num_tasks=10), RunConfig(),
                         tiny_model_dir, ["train", "eval"])
    assert counts == TaskCounts(train=8, eval=2)


def test_the_preflight_refuses_a_rollout_without_training_tasks(
        plugin_manager, tiny_model_dir) -> None:
    class NoTasks(StringOperationRollout):
        name = "no-tasks"

        def tasks(self, split):
            return []

    class Plugin:
        @hookimpl
        def register_rollouts(self, register):
            register(NoTasks)

    plugin_manager.load_for_run(RunConfig().wanted_plugins())  # the standard plugins
    plugin_manager.register(Plugin(), name="no-tasks")
    config = TrainFlags(argparse.ArgumentParser(), plugin_manager).parse(
        ["--rollout-plugin", "no-tasks"])  # the config `rollyard train` would build
    with pytest.raises(ConfigError, match=re.escape(
            "rollout 'no-tasks' has no training tasks (its tasks('train') is empty)")):
        PluginSelection(config, plugin_manager).preflight(config, tiny_model_dir)
