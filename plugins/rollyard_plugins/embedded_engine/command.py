"""``rollyard engine serve`` (and ``python -m rollyard_plugins.embedded_engine``) arguments."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

from rollyard import Command, ConfigError
from rollyard.bearer import read_token
from rollyard.options import add_spec_arguments, option_specs, options_from_args

from rollyard_plugins.embedded_engine.options import SERVER_OPTIONS, EmbeddedOptions


def server_specs() -> list:
    """The server's share of the engine options, as flags without a prefix."""
    return [s for s in option_specs(EmbeddedOptions, "") if s.name in SERVER_OPTIONS]


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of the embedded engine server."""
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="Hugging Face model folder (e.g. from `rollyard init-model`)")
    parser.add_argument("--port", type=int, default=30000, help="TCP port (default: 30000)")
    parser.add_argument("--host", default="127.0.0.1", help="address (default: 127.0.0.1)")
    add_spec_arguments(parser, server_specs(), dest_is_name=True)


def serve_from_args(args: SimpleNamespace) -> int:
    """Run the server until SIGINT/SIGTERM; return the exit status."""
    import asyncio
    import pathlib
    import signal
    import sys

    if not (pathlib.Path(args.model) / "config.json").is_file():
        print(f"error: --model {args.model}: no config.json there; build a model with "
              "`rollyard init-model DIR`", file=sys.stderr)
        return 2
    try:
        options = options_from_args(EmbeddedOptions, args, SERVER_OPTIONS)
        api_key = read_token(options.api_key_file, "--api-key-file")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    from rollyard_plugins.embedded_engine.server import serve

    # Progress bars start tqdm's monitor thread, which holds up interpreter exit by ~10 s.
    hf_logging.disable_progress_bar()

    async def main() -> None:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        await serve(args.model, args.host, args.port, options.max_batch_size,
                    options.weight_update_policy, options.threads,
                    options.weight_sync_timeout, options.dtype, api_key)

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        pass
    return 0


class EngineCommand(Command):
    """``rollyard engine serve --model DIR --port P``: run the embedded engine in the foreground."""

    name = "engine"
    help = "run the embedded CPU inference engine (SGLang HTTP protocol)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="engine_action", metavar="ACTION", required=True)
        add_serve_arguments(actions.add_parser(
            "serve", help="serve a model over HTTP until interrupted",
            description="Serve SGLang's /generate, /health, /get_model_info, "
                        "/update_weights_from_disk, the distributed weight update "
                        "(/init_weights_update_group, /update_weights_from_distributed), "
                        "/flush_cache and /abort_request."))

    def run(self, args: SimpleNamespace) -> int:
        return serve_from_args(args)
