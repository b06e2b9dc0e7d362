"""A rollout whose options decide its venv (``Rollout.isolated_environment``), through the CLI
on a throwaway plugin (tests/isolation/asker-plugin): ``--rollout-env shared`` refuses it with
its reason before anything starts, ``auto`` builds the venv it asks for with the requested
requirements and the plugin installed --no-deps (its own requirement cannot be resolved),
``rollyard env list`` shows the label, and the cache key follows the requirements."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from iso_helpers import flat, install_no_deps

HERE = Path(__file__).parent
EXTRA = HERE / "asker-extra"


@pytest.fixture(scope="session")
def asker_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_no_deps(HERE / "asker-plugin", tmp_path_factory.mktemp("asker") / "site")


def test_a_rollout_asking_for_a_venv_is_refused_shared_with_its_reason(
        rollyard_cli, asker_site: Path, tmp_path: Path) -> None:
    result = rollyard_cli("train", "--rollout-plugin", "asker", "--asker-need", str(EXTRA),
                          "--rollout-env", "shared", "--runs-dir", str(tmp_path / "runs"),
                          paths=[asker_site], env={"ROLLYARD_ENVS_DIR": str(tmp_path / "envs"),
                                                     "COLUMNS": "2000"})
    assert result.returncode == 1
    reason = (f"rollout 'asker' needs {EXTRA}, which this environment lacks: rollyard train "
              f"--rollout-plugin asker --asker-need {EXTRA} --rollout-env isolated")
    [line] = [line for line in result.stderr.splitlines() if "rollout 'asker' needs" in line]
    assert line == f"error: {reason}"  # one line (the console is wide enough not to wrap it)
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "envs").exists()

    evaluated = rollyard_cli("eval", "--rollout-plugin", "asker", "--asker-need", str(EXTRA),
                             "--runs-dir", str(tmp_path / "runs"), paths=[asker_site])
    assert evaluated.returncode == 1
    assert (f"rollyard eval runs rollout 'asker' in this process, where it cannot run: "
            f"{reason}") in flat(evaluated.stderr)


def test_auto_builds_the_requested_venv_with_the_plugin_without_its_requirements(
        rollyard_cli, asker_site: Path, isolated_envs_dir: Path, tmp_path: Path) -> None:
    """The run stops at the missing model, after the workers' venv was decided: no Ray."""
    env = {"ROLLYARD_ENVS_DIR": str(isolated_envs_dir)}
    args = ("train", "--rollout-plugin", "asker", "--asker-need", str(EXTRA), "--model",
            str(tmp_path / "no-model"), "--runs-dir", str(tmp_path / "runs"))
    first = rollyard_cli(*args, paths=[asker_site], env=env, timeout=600)
    assert "has no config.json" in flat(first.stderr), first.stderr[-3000:]
    text = flat(first.stderr)
    prefix = str(isolated_envs_dir / "asker-asker-extra-")
    [python] = [w for w in text.split() if w.startswith(prefix) and w.endswith("/bin/python")]
    assert f"rollout workers of 'asker' run on {python} (--rollout-env auto)" in text
    probe = subprocess.run(
        [python, "-c", "import asker_extra, rollyard_asker.plugin, importlib.metadata as md; "
                       "print(asker_extra.MARK, md.version('rollyard-asker-test'))"],
        capture_output=True, text=True)
    assert probe.stdout.split() == ["asker-extra", "0.1.0"], probe.stderr

    again = rollyard_cli(*args, paths=[asker_site], env=env)
    assert f"using the cached isolated environment {Path(python).parent.parent} of " \
           "'asker-asker-extra'" in flat(again.stderr)

    listed = rollyard_cli("env", "list", env=env)
    assert f"asker-asker-extra {Path(python).parent.parent} (requires: {EXTRA};" \
           in flat(listed.stdout)
    [entry] = [e for e in json.loads(rollyard_cli("env", "list", "--json", env=env).stdout)
               if e["path"] == str(Path(python).parent.parent)]
    assert entry["label"] == "asker-asker-extra"
    assert entry["distribution"] == "rollyard-asker-test"


def test_the_cache_key_follows_the_requested_requirements() -> None:
    from rollyard import IsolatedEnvironment
    from rollyard.isolation.envs import env_spec

    def spec(*requirements: str):
        return env_spec("rollyard", IsolatedEnvironment("ask", requirements, "why"))

    assert spec("a==1").key == spec("a==1").key
    assert len({spec("a==1").key, spec("a==2").key, spec("a==1", "b").key,
                env_spec("rollyard").key}) == 4
    assert spec("a==1").path.name == f"ask-{spec('a==1').key}"
    assert spec("a==1").sources[-1] == "a==1"
    loose = env_spec("rollyard", IsolatedEnvironment("ask", ("a==1",), "why", no_deps=("b",)))
    assert loose.key != spec("a==1").key and loose.no_deps == ("b",)
