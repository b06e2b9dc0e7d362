"""The ``sglang`` engine: real SGLang servers, launched from their own Python environment.

SGLang pins its own torch, transformers and openai, so it never shares rollyard's
environment: ``--sglang-python PATH`` names the interpreter of a venv where ``sglang`` is
installed, and rollyard talks to the server only over HTTP (the ``sglang`` transport). Each
server leads its own process group and is stopped with it; a server that does not become
healthy raises :class:`rollyard.EngineStartError` quoting its last log lines. Several servers
can be put behind one ``sglang-router`` (:class:`SGLangRouter`).

Options: :class:`SGLangOptions` (``--sglang-*``).
"""

from __future__ import annotations

import os
import pathlib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollyard import ConfigError, Engine, hookimpl
from rollyard.options import option, positive

from rollyard_plugins.embedded_engine.process import ProcessEngineHandle, free_port, launch_server


@dataclass(frozen=True)
class SGLangOptions:
    """How the run launches SGLang servers (``--sglang-*``)."""

    python: str | None = option(None, metavar="PATH",
                                help="Python of the virtual environment where sglang is "
                                     "installed (required)")
    device: str | None = option(None, help="launch_server --device (e.g. cpu)")
    dtype: str | None = option(None, help="launch_server --dtype (float32 on CPU)")
    extra_args: str = option("", metavar="ARGS",
                             help="more launch_server flags, one shell-quoted string")
    pythonpath: str | None = option(None, metavar="DIR",
                                    help="prepended to the server's PYTHONPATH")
    startup_timeout: float = option(600.0, check=positive,
                                    help="seconds to wait for the server's /health")
    log_dir: str | None = option(None, metavar="DIR", help="where server logs go")


def _get(options: Any, name: str) -> Any:
    return options.get(name) if isinstance(options, Mapping) else getattr(options, name)


def _python(options: Any) -> str:
    python = _get(options, "python")
    if not python:
        raise ConfigError("the sglang engine needs --sglang-python PATH: the interpreter of a "
                          "virtual environment where sglang is installed")
    if not (pathlib.Path(python).is_file() and os.access(python, os.X_OK)):
        raise ConfigError(f"--sglang-python {python!r} is not an executable file")
    return str(python)


def _environment(options: Any) -> dict[str, str]:
    env = dict(os.environ)
    extra = _get(options, "pythonpath")
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(extra), env.get("PYTHONPATH")) if p)
    return env


class SGLangEngine(Engine):
    """Launches ``python -m sglang.launch_server`` with the interpreter in ``--sglang-python``."""

    name = "sglang"
    Options = SGLangOptions

    def command(self, model_dir: str, port: int) -> list[str]:
        """The server's command line."""
        options: SGLangOptions = self.options
        command = [_python(options), "-m", "sglang.launch_server", "--model-path", str(model_dir),
                   "--host", "127.0.0.1", "--port", str(port)]
        if options.device:
            command += ["--device", options.device]
        if options.dtype:
            command += ["--dtype", options.dtype]
        return command + shlex.split(options.extra_args)

    def launch(self, model_dir: str, port: int) -> ProcessEngineHandle:
        port = port or free_port()
        options: SGLangOptions = self.options
        return launch_server(
            self.command(model_dir, port), f"http://127.0.0.1:{port}", name="sglang",
            timeout=options.startup_timeout, log_dir=options.log_dir,
            env=_environment(options))


class SGLangRouter:
    """``sglang-router`` in front of several engines: one URL that spreads requests over them.

    The router package lives in the same environment as SGLang (``pip install sglang-router``).
    """

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        self.options = dict(options or {})

    def command(self, worker_urls: Sequence[str], port: int) -> list[str]:
        if not worker_urls:
            raise ConfigError("sglang-router needs at least one engine URL")
        return [_python(self.options), "-m", "sglang_router.launch_router", "--host",
                "127.0.0.1", "--port", str(port), "--worker-urls", *worker_urls,
                *shlex.split(self.options.get("router_args") or "")]

    def launch(self, worker_urls: Sequence[str], port: int = 0) -> ProcessEngineHandle:
        port = port or free_port()
        # /health answers as soon as the router listens; /readiness only once a worker is
        # healthy and requests can be routed.
        return launch_server(
            self.command(worker_urls, port), f"http://127.0.0.1:{port}", name="sglang-router",
            timeout=float(self.options.get("startup_timeout") or 120.0),
            log_dir=self.options.get("log_dir"), env=_environment(self.options),
            health_path="/readiness")


@hookimpl
def register_engines(register: Any) -> None:
    register(SGLangEngine)
