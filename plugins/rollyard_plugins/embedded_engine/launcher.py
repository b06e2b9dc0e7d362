"""The ``embedded`` engine: starts the embedded server as a subprocess of the run."""

from __future__ import annotations

import sys
from typing import Any

from rollyard import Engine

from rollyard_plugins.embedded_engine.command import DEFAULT_MAX_BATCH_SIZE, DEFAULT_THREADS
from rollyard_plugins.embedded_engine.process import ProcessEngineHandle, free_port, launch_server

DEFAULT_STARTUP_TIMEOUT = 120.0


class EmbeddedEngine(Engine):
    """Launches ``python -m rollyard_plugins.embedded_engine`` on loopback.

    Options (all optional): ``max_batch_size``, ``weight_update_policy`` (wait | abort),
    ``threads``, ``startup_timeout`` (seconds), ``log_dir``, ``python`` (interpreter).
    """

    name = "embedded"

    def launch(self, model_dir: str, port: int) -> ProcessEngineHandle:
        options: dict[str, Any] = {k: v for k, v in self.options.items() if v is not None}
        port = port or free_port()
        url = f"http://127.0.0.1:{port}"
        command = [
            str(options.get("python", sys.executable)), "-m", "rollyard_plugins.embedded_engine",
            "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
            "--max-batch-size", str(options.get("max_batch_size", DEFAULT_MAX_BATCH_SIZE)),
            "--weight-update-policy", str(options.get("weight_update_policy", "wait")),
            "--threads", str(options.get("threads", DEFAULT_THREADS))]
        return launch_server(command, url, name="embedded",
                             timeout=float(options.get("startup_timeout",
                                                       DEFAULT_STARTUP_TIMEOUT)),
                             log_dir=options.get("log_dir"))
