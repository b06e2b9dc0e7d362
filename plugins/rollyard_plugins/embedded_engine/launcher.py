"""The ``embedded`` engine: starts the embedded server as a subprocess of the run."""

from __future__ import annotations

import sys

from rollyard import Engine

from rollyard_plugins.embedded_engine.command import server_specs
from rollyard_plugins.embedded_engine.options import EmbeddedOptions
from rollyard_plugins.embedded_engine.process import ProcessEngineHandle, free_port, launch_server


class EmbeddedEngine(Engine):
    """Launches ``python -m rollyard_plugins.embedded_engine`` on loopback."""

    name = "embedded"
    Options = EmbeddedOptions

    def launch(self, model_dir: str, port: int) -> ProcessEngineHandle:
        options: EmbeddedOptions = self.options
        port = port or free_port()
        url = f"http://127.0.0.1:{port}"
        command = [options.python or sys.executable, "-m", "rollyard_plugins.embedded_engine",
                   "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port)]
        for spec in server_specs():
            value = getattr(options, spec.name)
            if value is not None:
                command += [spec.flag, str(value)]
        return launch_server(command, url, name="embedded", timeout=options.startup_timeout,
                             log_dir=options.log_dir)
