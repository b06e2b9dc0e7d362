"""Which verifiers an environment gets (rollyard_verifiers.selection), from its files and its
distribution's metadata, never by importing it: the environments here raise when imported.
The package index is a local PEP 503 folder (``UV_DEFAULT_INDEX=file://…``), so the releases it
lists are the test's own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rollyard import ConfigError

ENVS = Path(__file__).parent / "envs"
RELEASES = ["0.2.0", "0.3.1", "0.3.2.dev5", "0.4.0", "0.4.1"]  # and a yanked 0.3.5
LEGACY_SOURCE = '''\
import verifiers as vf

raise RuntimeError("{module} was imported")


def load_environment(**kwargs):
    return vf.SingleTurnEnv(dataset=None, rubric=vf.Rubric(funcs=[]))
'''


def write_environment(root: Path, module: str, requires: str | None, source: str = "") -> Path:
    """A published-style environment module in ``root`` (a folder for PYTHONPATH); with
    ``requires``, the dist-info ``pip install --no-deps`` leaves, declaring it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(source or LEGACY_SOURCE.format(module=module))
    if requires is not None:
        name = module.replace("_", "-")
        info = root / f"{module}-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n"
                                       f"Requires-Dist: {requires}\nRequires-Dist: datasets\n")
        (info / "top_level.txt").write_text(f"{module}\n")
    return root


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A local simple index listing RELEASES of verifiers, uv's only index."""
    page = tmp_path / "simple" / "verifiers"
    page.mkdir(parents=True)
    links = [f'<a href="verifiers-{v}-py3-none-any.whl#sha256=00">x</a>' for v in RELEASES]
    links.append('<a href="verifiers-0.3.5.tar.gz" data-yanked="broken">verifiers-0.3.5</a>')
    (page / "index.html").write_text("<html><body>" + "\n".join(links) + "</body></html>")
    for name in ("UV_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS",
                 "UV_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("UV_DEFAULT_INDEX", (tmp_path / "simple").as_uri())
    return tmp_path / "simple"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def request(env_id: str, version: str | None = None):
    from rollyard_verifiers.selection import environment_request

    return environment_request(env_id, version)


@pytest.mark.parametrize(("requires", "chosen"), [
    ("verifiers>=0.3.1", "0.3.1"),  # published with a loose >=, calling the pre-0.4 names
    ("verifiers>=0.2.0,<0.3", "0.2.0"),
    (None, "0.3.1"),  # on PYTHONPATH without metadata: no requirement of its own
])
def test_a_legacy_environment_gets_the_newest_release_of_its_api_meeting_its_requirement(
        index: Path, site: Path, requires: str | None, chosen: str) -> None:
    write_environment(site, "vf_probe", requires)
    asked = request("owner/vf-probe")  # ids as verifiers forms them: - to _, after the last /
    assert asked.label == f"verifiers-{chosen}-vf_probe"
    wanted = [f"verifiers=={chosen}", "renderers>=0.1.8,<0.1.11", "uv", "aiohttp>=3.9"]
    if requires is None:
        assert list(asked.requirements) == wanted
    else:  # its other requirements; the distribution itself --no-deps (its pin loses)
        assert list(asked.requirements) == ["datasets", *wanted]
        assert asked.no_deps == ("vf-probe==0.1.0",)
    assert "vf_probe" not in sys.modules


def test_verifiers_version_overrides_within_the_api_generation(index: Path, site: Path) -> None:
    write_environment(site, "vf_probe", "verifiers>=0.3.1")
    asked = request("vf-probe", "0.2.0")
    assert "verifiers==0.2.0" in asked.requirements
    assert asked.label == "verifiers-0.2.0-vf_probe"
    assert "--verifiers-version 0.2.0 --rollout-env isolated" in asked.reason
    with pytest.raises(ConfigError) as wrong:
        request("vf-probe", "0.4.0")
    assert str(wrong.value) == (
        "--verifiers-version 0.4.0: verifiers environment 'vf-probe' is written against the "
        "pre-0.4 verifiers API (load_environment), which only verifiers<0.4 has")
    with pytest.raises(ConfigError) as missing:
        request("vf-probe", "0.3.7")
    assert str(missing.value) == ("--verifiers-version 0.3.7: the package index has no "
                                  "verifiers 0.3.7; it has 0.2.0, 0.3.1, 0.4.0, 0.4.1")


def test_a_requirement_no_release_meets_names_it_and_the_releases(index: Path,
                                                                  site: Path) -> None:
    write_environment(site, "vf_future", "verifiers>=0.9")
    with pytest.raises(ConfigError) as error:
        request("vf-future")
    assert str(error.value) == (
        "verifiers environment 'vf-future': its distribution 'vf-future' requires "
        "verifiers>=0.9 and it is written against the pre-0.4 verifiers API "
        "(load_environment) (verifiers<0.4); no release satisfies both (verifiers<0.4,>=0.9): "
        "the package index has 0.2.0, 0.3.1, 0.4.0, 0.4.1")


def test_an_id_naming_nothing_lists_the_nearest_installed_environments(site: Path) -> None:
    write_environment(site, "vf_probe", None)
    (site / "vf_prose.py").write_text("X = 1\n")  # near, but nothing of verifiers
    with pytest.raises(ConfigError) as error:
        request("vf-prob")
    assert str(error.value).startswith(
        "verifiers environment 'vf-prob': no importable module 'vf_prob' (nearest installed "
        "verifiers environments: vf_probe")  # then the test modules here that look alike
    assert str(error.value).endswith(
        ") (install it with pip install --no-deps, or put its folder on PYTHONPATH)")
    with pytest.raises(ConfigError, match=r"vf_prose\.py has neither a load_environment "
                                          r"function"):
        request("vf-prose")


def test_a_taskset_runs_where_the_plugin_is_unless_a_version_is_asked(
        index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ENVS))
    import verifiers

    assert request("rollyard_vf_arith") is None
    assert request("rollyard_vf_arith", verifiers.__version__) is None
    asked = request("rollyard_vf_arith", "0.4.1")
    assert list(asked.requirements) == ["verifiers==0.4.1", "uv", "aiohttp>=3.9"]
    with pytest.raises(ConfigError, match=r"only verifiers>=0\.4 has"):
        request("rollyard_vf_arith", "0.3.1")


def test_without_a_readable_index_uv_picks_within_the_intersection(
        site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_environment(site, "vf_probe", "verifiers>=0.3.1")
    monkeypatch.setenv("UV_DEFAULT_INDEX", (tmp_path / "no-index").as_uri())
    asked = request("vf-probe")
    assert "verifiers<0.4,>=0.3.1" in asked.requirements
    assert asked.label == "verifiers-0.4_0.3.1-vf_probe"


def test_index_versions_reads_simple_pages_and_wheel_folders(
        index: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rollyard_verifiers.index import index_versions

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "verifiers-0.1.9.post3-py3-none-any.whl").touch()
    (wheels / "renderers-0.1.8-py3-none-any.whl").touch()
    monkeypatch.setenv("UV_FIND_LINKS", str(wheels))
    assert [str(v) for v in index_versions("verifiers")] == ["0.1.9.post3", *RELEASES]
    monkeypatch.setenv("UV_OFFLINE", "1")
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://pypi.org/simple")
    assert [str(v) for v in index_versions("verifiers")] == ["0.1.9.post3"]


def test_the_shared_environment_refuses_a_legacy_environment_in_one_line(
        rollyard_cli, index: Path, site: Path, tmp_path: Path) -> None:
    write_environment(site, "vf_probe", "verifiers>=0.3.1")
    result = rollyard_cli("train", "--rollout-plugin", "verifiers", "--vf-env", "vf-probe",
                          "--rollout-env", "shared", "--runs-dir", str(tmp_path / "runs"),
                          paths=[site], env={"COLUMNS": "2000", "UV_DEFAULT_INDEX":
                                             index.as_uri()})
    assert result.returncode == 1
    [line] = [line for line in result.stderr.splitlines() if line.strip()]
    import verifiers  # the core's: 0.4

    assert line == (
        f"error: verifiers environment 'vf-probe' ({site / 'vf_probe.py'}) is written against "
        "the pre-0.4 verifiers API (load_environment) and needs verifiers==0.3.1, which the "
        f"core's environment does not have (verifiers {verifiers.__version__}): run it in a "
        "venv of its own, rollyard train --rollout-plugin verifiers --vf-env vf-probe "
        "--rollout-env isolated (auto does the same)")
    assert not (tmp_path / "runs").exists()
    nothing = rollyard_cli("train", "--rollout-plugin", "verifiers", "--vf-env", "vf-prob",
                           "--runs-dir", str(tmp_path / "runs"), paths=[site],
                           env={"COLUMNS": "2000"})
    assert nothing.returncode == 1
    assert [line for line in nothing.stderr.splitlines() if line.strip()] == [
        "error: verifiers environment 'vf-prob': no importable module 'vf_prob' (nearest "
        "installed verifiers environments: vf_probe) (install it with pip install --no-deps, "
        "or put its folder on PYTHONPATH)"]
    assert not (tmp_path / "runs").exists()


def test_installing_a_taskset_builds_nothing(rollyard_cli, tmp_path: Path) -> None:
    result = rollyard_cli("verifiers", "install", "rollyard_vf_arith", paths=[ENVS],
                          env={"ROLLYARD_ENVS_DIR": str(tmp_path / "envs")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [sys.prefix]
    assert "'rollyard_vf_arith' is a verifiers 0.4 taskset: it runs in the environment " \
           "rollyard-verifiers is installed in; nothing to build" in " ".join(result.stderr.split())
    assert not (tmp_path / "envs").exists()


def test_inspection_imports_neither_the_environment_nor_verifiers(site: Path) -> None:
    write_environment(site, "vf_probe", "verifiers>=0.3.1")
    probe = textwrap.dedent("""\
        import sys
        from rollyard_verifiers.resolve import find_environment
        found = find_environment("vf-probe")
        print(found.generation.value, found.requirement,
              [m for m in ("verifiers", "vf_probe") if m in sys.modules])
        """)
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip().split(maxsplit=2) == ["legacy", ">=0.3.1", "[]"], done.stderr
