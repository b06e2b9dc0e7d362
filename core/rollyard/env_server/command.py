"""``rollyard env-server``: the CLI that serves one rollout plugin (docs/remote.md)."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import ssl
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rollyard.bearer import read_token
from rollyard.config import RunConfig
from rollyard.errors import ConfigError
from rollyard.plugin_options import table_of
from rollyard.plugins import PluginManager


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """The server's own flags (the rollout plugin's come from the train flags)."""
    group = parser.add_argument_group("env server")
    group.add_argument("--host", default="127.0.0.1", help="address to bind (default: "
                       "127.0.0.1; any other address needs --token-file)")
    group.add_argument("--port", type=int, default=8765, help="port (default: 8765; 0: any)")
    group.add_argument("--token-file", metavar="FILE", default=None,
                       help="file holding the bearer token every request but GET /health needs")
    group.add_argument("--model-dir", metavar="DIR", default=None,
                       help="the run's model folder (its tokenizer) on this machine (default: "
                            "the path the trainer sends, for a shared file system)")
    group.add_argument("--tls-cert", metavar="PEM", default=None, help="TLS certificate")
    group.add_argument("--tls-key", metavar="PEM", default=None, help="TLS private key")


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (localhost, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tls_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    if (cert is None) != (key is None):
        raise ConfigError("--tls-cert and --tls-key go together; give both or neither")
    if cert is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"--tls-cert {cert!r} / --tls-key {key!r}: {exc}") from None
    return context


def plugin_config(config: RunConfig, manager: PluginManager) -> dict[str, Any]:
    """What the server puts over a trainer's spec: its rollout plugin and that plugin's
    option table."""
    name = config.rollout_plugin
    if "," in name or ":" in name:
        raise ConfigError(f"--rollout-plugin {name!r}: an env server serves one environment")
    table = table_of(manager.get("rollout", name), manager.owner("rollout", name).name)
    data = config.to_data()
    return {"rollout_plugin": name, **({table: data[table]} if table in data else {})}


def serve(config: RunConfig, manager: PluginManager, args: SimpleNamespace) -> int:
    """Serve ``config``'s rollout plugin until SIGINT/SIGTERM."""
    from aiohttp import web

    from rollyard.env_server.app import EnvServer, worker_factory

    token = read_token(args.token_file, "--token-file")
    if token is None and not is_loopback(args.host):
        raise ConfigError(f"--host {args.host}: a non-loopback address needs --token-file "
                          "(anyone who reaches it could run episodes)")
    context = tls_context(args.tls_cert, args.tls_key)
    if args.model_dir is not None and not Path(args.model_dir, "config.json").is_file():
        raise ConfigError(f"--model-dir {args.model_dir}: no model folder there (no "
                          "config.json)")
    server = EnvServer(worker_factory(plugin_config(config, manager), args.model_dir), token,
                       config.rollout_plugin)
    sock = socket.create_server((args.host, args.port), reuse_port=False)
    scheme = "https" if context else "http"
    host, port = sock.getsockname()[:2]
    print(f"env-server: {config.rollout_plugin} on {scheme}://{host}:{port}", flush=True,
          file=sys.stderr)
    web.run_app(server.app(), sock=sock, ssl_context=context, print=None,
                handle_signals=True)
    return 0
