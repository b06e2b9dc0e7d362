"""Shared fixtures: a fresh plugin manager, throwaway plugin distributions, and Ray."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
from rollyard.plugins import PluginManager

RAY_INIT = {"num_cpus": 2, "object_store_memory": 200 * 1024**2, "include_dashboard": False,
            "ignore_reinit_error": True}


# --------------------------------------------------------------------------- hook calls


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-hook-calls", metavar="PATH", default=None,
        help="write to PATH (JSON lines) which rollyard hooks each test made rollyard's own "
             "code call, with at least one implementation (tests/test_docs.py reads it)")


class HookCallRecorder:
    """Watches every rollyard PluginManager made during the session (pluggy's hook-call
    monitoring) and keeps ``(test, hook, caller)`` for each call that rollyard's own code made
    and some plugin implemented; a test calling ``pm.hook.x`` itself does not count."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.test = ""
        self.calls: dict[tuple[str, str, str], list[str]] = {}
        self._init = PluginManager.__init__

    def install(self) -> None:
        recorder, init = self, self._init

        def watched_init(manager: PluginManager, *args: object, **kwargs: object) -> None:
            init(manager, *args, **kwargs)
            manager.pm.add_hookcall_monitoring(recorder.before, lambda *_: None)

        PluginManager.__init__ = watched_init

    def uninstall(self) -> None:
        PluginManager.__init__ = self._init
        with self.path.open("w") as out:
            for (test, hook, caller), plugins in sorted(self.calls.items()):
                out.write(json.dumps({"test": test, "hook": hook, "caller": caller,
                                      "plugins": plugins}) + "\n")

    def before(self, hook_name: str, impls: list, kwargs: dict) -> None:
        if not impls:
            return
        frame = sys._getframe(1)
        while frame is not None and frame.f_globals.get("__name__", "").startswith("pluggy"):
            frame = frame.f_back
        module = frame.f_globals.get("__name__", "") if frame is not None else ""
        if module == "rollyard" or module.startswith("rollyard."):
            caller = f"{module}.{frame.f_code.co_qualname}"
            self.calls.setdefault((self.test, hook_name, caller), sorted(
                {impl.plugin_name for impl in impls}))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self.test = item.nodeid
        try:
            return (yield)
        finally:
            self.test = ""


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        import xdist_crashes  # tests/ is on sys.path: this conftest's folder

        config.pluginmanager.register(xdist_crashes, "rollyard-xdist-crashes")
    path = config.getoption("--record-hook-calls")
    if path:
        recorder = HookCallRecorder(Path(path))
        recorder.install()
        config.pluginmanager.register(recorder, "rollyard-hook-call-recorder")


def pytest_unconfigure(config: pytest.Config) -> None:
    recorder = config.pluginmanager.get_plugin("rollyard-hook-call-recorder")
    if recorder is not None:
        recorder.uninstall()


@pytest.fixture(scope="session")
def ray_session() -> Iterator[object]:
    """Ray started once per test session, only when a test asks for it."""
    import ray

    ray.init(**RAY_INIT)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def plugin_manager(rollyard_manager: PluginManager) -> PluginManager:
    """The shipped pytest plugin's ``rollyard_manager`` (dogfooded): a manager that sees no
    entry points until asked and ignores the caller's ROLLYARD_* variables; everything
    registered in-process is unregistered afterwards."""
    return rollyard_manager


#: make_distribution(name, modules={"pkg_mod.py": source}, entry_points={"ep": "pkg_mod"})
MakeDistribution = Callable[..., Path]


@pytest.fixture
def make_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MakeDistribution:
    """Create an importable distribution with ``rollyard`` entry points in a folder on
    ``sys.path`` (a ``.dist-info`` with METADATA and entry_points.txt beside its modules),
    the way an installed wheel looks to ``importlib.metadata``. Returns that folder, which a
    subprocess sees when it is on PYTHONPATH. The modules are forgotten afterwards."""
    root = tmp_path / "site"
    root.mkdir()
    created: list[str] = []

    def make(name: str, modules: dict[str, str], entry_points: dict[str, str],
             version: str = "1.0") -> Path:
        for filename, source in modules.items():
            (root / filename).write_text(textwrap.dedent(source))
            created.append(filename.removesuffix(".py"))
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(
            "[rollyard]\n" + "".join(f"{ep} = {target}\n" for ep, target in entry_points.items()))
        monkeypatch.syspath_prepend(str(root))  # also clears importlib.metadata's path cache
        return root

    yield make
    for module in created:
        sys.modules.pop(module, None)


RunRollyard = Callable[..., subprocess.CompletedProcess]


@pytest.fixture(scope="session")
def rollyard_cli() -> RunRollyard:
    """Run the installed ``rollyard`` console script in a fresh process:
    ``rollyard_cli("plugins", "--json", paths=[site], env={"ROLLYARD_TRACE_PLUGINS": "1"})``.
    The caller's ROLLYARD_* variables are dropped; ``paths`` go first on PYTHONPATH."""
    script = str(Path(sys.executable).with_name("rollyard"))

    def run(*args: str, paths: Iterable[Path] = (), env: dict[str, str] | None = None,
            cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("ROLLYARD_")}
        pythonpath = [str(p) for p in paths] + [environ.get("PYTHONPATH", "")]
        environ["PYTHONPATH"] = os.pathsep.join(p for p in pythonpath if p)
        environ["COLUMNS"] = "200"
        environ.update(env or {})
        return subprocess.run([script, *args], capture_output=True, text=True, env=environ,
                              cwd=cwd, timeout=timeout)

    return run


@pytest.fixture(scope="session")
def isolated_envs_dir() -> Path:
    """Where tests cache isolated rollout venvs (``ROLLYARD_ENVS_DIR``): outside the session's
    temporary folders, so the next session reuses them instead of building again."""
    return Path.home() / ".cache" / "rollyard" / "test-envs"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiny Qwen3 model (seed 0) with its ChatML tokenizer, built once."""
    from rollyard.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"), arch="qwen3", seed=0)


@pytest.fixture(scope="session")
def embedded_engine(tiny_model_dir: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The embedded engine serving ``tiny_model_dir`` on a free port, for the whole session.
    Tests that load other weights into it must load the original ones back."""
    from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine

    engine = EmbeddedEngine({"max_batch_size": 64, "threads": 1,
                             "log_dir": str(tmp_path_factory.mktemp("engine-logs"))})
    handle = engine.launch(str(tiny_model_dir), 0)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="session")
def documented_metric() -> Callable[[str], bool]:
    """Whether docs/metrics.md lists a metrics.jsonl key: the keys in the first column of the
    tables of its metrics.jsonl section, a ``<name>`` part matching any text."""
    text = (Path(__file__).parent.parent / "docs" / "metrics.md").read_text()
    section = text.split("## metrics.jsonl", 1)[1].split("\n## ", 1)[0]
    keys = [key for line in section.splitlines() if line.startswith("| `")
            for key in re.findall(r"`([^`]+)`", line.split(" | ")[0])]
    patterns = [re.compile("".join(".+" if part.startswith("<") else re.escape(part)
                                   for part in re.split(r"(<[^>]+>)", key)) + "$")
                for key in keys]
    return lambda key: any(pattern.match(key) for pattern in patterns)
