"""Isolated rollout environments, through the CLI: the clash the project started from (a plugin
pinning ``openai==2.6.1`` while the core keeps the openai verifiers needs), a requirement uv
cannot resolve, a broken cached venv, and a worker dying mid-run.

The plugins are installed the way docs/isolation.md tells users to: ``pip install --no-deps``
(here into a folder on PYTHONPATH, so the project's venv is left as it is). Their venvs are
cached where ``isolated_envs_dir`` says, so a second test session reuses them.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import textwrap
from pathlib import Path

import pytest
from iso_helpers import flat, install_no_deps

CLASH_SOURCE = Path(__file__).parent / "clash-plugin"


@pytest.fixture(scope="session")
def clash_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_no_deps(CLASH_SOURCE, tmp_path_factory.mktemp("clash") / "site")


def test_the_clashing_plugin_is_refused_in_the_shared_environment(
        rollyard_cli, clash_site: Path, isolated_envs_dir: Path, tmp_path: Path) -> None:
    assert md.version("openai") != "2.6.1"  # the clash is real
    result = rollyard_cli("train", "--rollout-plugin", "clash", "--runs-dir",
                          str(tmp_path / "runs"), paths=[clash_site],
                          env={"ROLLYARD_ENVS_DIR": str(isolated_envs_dir)})
    assert result.returncode == 1
    assert (f"rollout 'clash' (distribution 'rollyard-clash-test') requires openai==2.6.1 "
            f"(this environment has openai {md.version('openai')}): run it in its own "
            "environment with --rollout-env isolated") in flat(result.stderr)
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()  # refused before the run (and Ray) started


def test_rollyard_eval_refuses_to_isolate_the_rollout_it_runs_in_process(
        rollyard_cli, clash_site: Path, tmp_path: Path) -> None:
    result = rollyard_cli("eval", "--rollout-plugin", "clash", "--rollout-env", "isolated",
                          "--runs-dir", str(tmp_path / "runs"), paths=[clash_site])
    assert result.returncode == 1
    assert ("rollyard eval runs rollout 'clash' in this process, so it cannot isolate it "
            "(--rollout-env isolated)") in flat(result.stderr)
    assert not (tmp_path / "runs").exists()


def test_an_unresolvable_requirement_is_named_before_training(
        rollyard_cli, tmp_path: Path) -> None:
    source = tmp_path / "nosuch"
    (source / "rollyard_nosuch").mkdir(parents=True)
    (source / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "rollyard-nosuch"
        version = "0.1.0"
        dependencies = ["rollyard", "rollyard-no-such-package==1.0"]
        [project.entry-points.rollyard]
        nosuch = "rollyard_nosuch"
        """))
    (source / "rollyard_nosuch" / "__init__.py").write_text(textwrap.dedent("""\
        from rollyard import hookimpl
        from rollyard_plugins.toy import StringOperationRollout

        class Isolated(StringOperationRollout):
            name = "nosuch"
            isolated = True  # the plugin's declaration: --rollout-env auto isolates it

        @hookimpl
        def register_rollouts(register):
            register(Isolated)
        """))
    site = install_no_deps(source, tmp_path / "site")
    result = rollyard_cli("train", "--rollout-plugin", "nosuch", "--runs-dir",
                          str(tmp_path / "runs"), paths=[site],
                          env={"ROLLYARD_ENVS_DIR": str(tmp_path / "envs")})
    assert result.returncode == 1
    message = flat(result.stderr)
    assert ("cannot build the isolated environment of 'rollyard-nosuch' (it requires "
            "rollyard-no-such-package==1.0): uv failed:") in message
    assert "rollyard-no-such-package" in message.split("uv failed:")[1]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()
    assert not any((tmp_path / "envs").glob("rollyard-nosuch-*/"))  # no half-built venv kept


@pytest.mark.slow
def test_a_rollout_failing_to_build_in_its_venv_is_refused_before_ray(
        rollyard_cli, clash_site: Path, isolated_envs_dir: Path, tiny_model_dir: Path,
        tmp_path: Path) -> None:
    """The preflight builds the rollout on the venv's Python (openai 2.6.1 there) and brings
    its error back as one line, before Ray and the run folder."""
    result = rollyard_cli(
        "train", "--rollout-plugin", "clash", "--rollout-env", "isolated",
        "--clash-fail-to-build", "no judge configured", "--model", str(tiny_model_dir),
        "--runs-dir", str(tmp_path / "runs"), paths=[clash_site],
        env={"ROLLYARD_ENVS_DIR": str(isolated_envs_dir)}, timeout=600)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: rollout 'clash' failed to build: RuntimeError: no judge "
                      "configured (openai 2.6.1)"], result.stderr
    assert "Traceback" not in result.stderr and "ray" not in result.stderr.lower()
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_env_build_finds_rebuilds_a_broken_venv_and_lists_it(
        rollyard_cli, clash_site: Path, isolated_envs_dir: Path) -> None:
    env = {"ROLLYARD_ENVS_DIR": str(isolated_envs_dir)}
    first = rollyard_cli("env", "build", "clash", paths=[clash_site], env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    path = Path(first.stdout.splitlines()[-1])
    assert path.parent == isolated_envs_dir
    (path / "bin" / "python").unlink()  # a half-deleted venv

    again = rollyard_cli("env", "build", "clash", paths=[clash_site], env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"the isolated environment {path} of 'rollyard-clash-test' is incomplete or " \
           "broken; rebuilding it" in flat(again.stderr)
    assert Path(again.stdout.splitlines()[-1]) == path
    probe = subprocess.run([str(path / "bin" / "python"), "-c",
                            "import openai, ray; print(openai.__version__, ray.__version__)"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.split() == ["2.6.1", md.version("ray")]

    listed = rollyard_cli("env", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    [entry] = [e for e in json.loads(listed.stdout) if e["path"] == str(path)]
    assert entry["distribution"] == "rollyard-clash-test"
    assert entry["requirements"] == ["openai==2.6.1"]


@pytest.mark.slow
def test_the_clashing_plugin_trains_in_isolation_beside_a_shared_one_and_survives_a_dead_worker(
        rollyard_cli, clash_site: Path, isolated_envs_dir: Path, tiny_model_dir: Path,
        tmp_path: Path) -> None:
    """Two steps of a mixed run through the CLI: the clashing plugin isolated (weight 2), the
    toy plugin in the core's environment (weight 1); the first clash worker to run a group
    exits on the spot."""
    runs = tmp_path / "runs"
    (tmp_path / "run.toml").write_text(textwrap.dedent("""\
        [[rollout]]
        name = "clash"
        weight = 2
        rollout_env = "isolated"

        [[rollout]]
        name = "toy"
        rollout_env = "shared"
        """))
    result = rollyard_cli(
        "train", "--config", str(tmp_path / "run.toml"),
        "--clash-die-once-file", str(tmp_path / "died"), "--model", str(tiny_model_dir),
        "--steps", "2", "--groups-per-step", "3", "--group-size", "4",
        "--rollout-workers", "2", "--num-cpus", "2", "--max-new-tokens", "8",
        "--failure-threshold", "0.6", "--keep-zero-variance-groups", "--no-progress",
        "--runs-dir", str(runs), paths=[clash_site],
        env={"ROLLYARD_ENVS_DIR": str(isolated_envs_dir)}, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "died").exists()
    [run] = list(runs.iterdir())
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert [(m["samples/count/clash"], m["samples/count/toy"]) for m in metrics] == [(8, 4)] * 2
    # step 1: the dead worker's group failed, the other one ran; step 2: the restarted worker
    assert [m["samples/failed_rate"] for m in metrics] == [4 / 12, 0.0]
    failed = [s for s in samples if s["status"] == "failed"]
    assert len(failed) == 4 and all(s["step"] == 1 and s["env"] == "clash" for s in failed)
    assert all("rollout worker failed" in s["failure"] for s in failed)
    ran = [s for s in samples if s["status"] != "failed"]
    assert sorted(s["env"] for s in ran) == ["clash"] * 12 + ["toy"] * 8
    # the clash workers' own openai, while the core (and the toy workers) keep theirs
    assert {s["metadata"]["openai"] for s in ran if s["env"] == "clash"} == {"2.6.1"}
    assert md.version("openai") != "2.6.1"
    assert all(s["task_id"].startswith(f"{s['env']}/") for s in samples)
