"""Load a verifiers (>= 0.4) environment by id, ready to run offline from the project's venv.

Three things verifiers does not do by itself here:

* Taskset ids are importable module names, but verifiers looks a dotted id up as
  ``verifiers.v1.tasksets.<id>`` first, which fails on the missing parent package. A dotted
  id (``rollyard_codegolf.verifiers_env``) is therefore registered under that namespace too.
* The ``null`` harness runs its chat program through ``uv``. ``uv`` is a dependency of this
  distribution, so it sits in this venv's scripts folder, which is put first on the harness's
  ``PATH``; the Python interpreter is pinned to this one (no downloads).
* ``scripts/install.d/verifiers.sh`` builds a PEP 503 index of the chat program's wheels in
  ``<venv>/share/rollyard-verifiers/simple``; when present, ``uv`` resolves from it only.
  ``ROLLYARD_VERIFIERS_INDEX`` names another such folder (an isolated rollout venv uses the
  core venv's, docs/isolation.md).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import os
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TASKSET_NAMESPACE = "verifiers.v1.tasksets"
OFFLINE_INDEX = Path(sys.prefix) / "share" / "rollyard-verifiers" / "simple"


def register_taskset_id(env_id: str) -> str:
    """Make ``env_id`` loadable by verifiers and return it. Dotted ids are imported here and
    aliased (with their parent packages) under verifiers' taskset namespace."""
    if "." not in env_id:
        return env_id
    try:
        importlib.import_module(env_id)
    except ImportError as exc:
        raise ModuleNotFoundError(f"verifiers environment {env_id!r} is not importable: "
                                  f"{exc}") from exc
    parts = env_id.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        sys.modules.setdefault(f"{TASKSET_NAMESPACE}.{name}", sys.modules[name])
    return env_id


def harness_env() -> dict[str, str]:
    """Variables for harness programs: this venv's ``uv`` and Python, the offline index."""
    scripts = sysconfig.get_path("scripts")
    env = {
        "PATH": os.pathsep.join([scripts, os.environ.get("PATH", "")]),
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
    }
    index = Path(os.environ.get("ROLLYARD_VERIFIERS_INDEX") or OFFLINE_INDEX).resolve()
    if (index / "index.html").is_file():
        env["UV_DEFAULT_INDEX"] = index.as_uri()
    return env


def env_config(env_id: str, overrides: Mapping[str, Any] | None = None,
               max_turns: int | None = None) -> dict[str, Any]:
    """The raw verifiers env config: the taskset, then for every agent role the env declares
    (``agent`` for a plain taskset; ``assistant`` and ``user`` for ``user_sim`` …) the local
    ``subprocess`` runtime and :func:`harness_env`, the ``null`` harness unless the taskset
    bundles one, ``max_turns`` when given; then ``overrides`` merged in depth."""
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.utils.loaders import default_harness_id, env_config_type

    base = deep_merge({"taskset": {"id": env_id}}, overrides or {})
    taskset_id = register_taskset_id(str(base["taskset"].get("id") or env_id))
    bundled = default_harness_id(taskset_id) != "bash"
    fields = env_config_type(taskset_id, str(base.get("id") or "")).model_fields
    roles: dict[str, Any] = {}
    for name, field in fields.items():
        if not isinstance(field.default, AgentConfig):
            continue
        declared = field.default.harness
        harness: dict[str, Any] = {"env": harness_env()}
        if declared is None and not bundled:
            harness["id"] = "null"
        role: dict[str, Any] = {"harness": harness, "runtime": {"type": "subprocess"}}
        if max_turns is not None:
            role["max_turns"] = max_turns
        roles[name] = role
    return deep_merge(roles, base)


def deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged into it, nested mappings merged key by key."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def check_async_scoring(task: Any, env_id: str) -> None:
    """verifiers 0.4 awaits every ``@vf.reward`` and ``@vf.metric`` of a task (a plain ``def``
    fails at scoring time as "An asyncio.Future, a coroutine or an awaitable is required"):
    refuse a synchronous one up front, naming it."""
    from verifiers.v1.utils.decorators import discover_decorated

    for kind in ("reward", "metric"):
        for fn in discover_decorated(task, kind):
            if not inspect.iscoroutinefunction(fn):
                name = f"{type(task).__name__}.{fn.__name__}"
                raise TypeError(f"{kind} function {name} of verifiers environment {env_id!r} "
                                f"is synchronous; verifiers 0.4 awaits {kind} functions: "
                                f"declare it 'async def {fn.__name__}'")


def load_environment(config: Mapping[str, Any]) -> Any:
    """The verifiers ``Env`` for a raw config from :func:`env_config`."""
    import verifiers.v1 as vf

    register_taskset_id(config["taskset"]["id"])
    return vf.load_environment(vf.resolve_env_config(copy.deepcopy(dict(config))))
