"""``rollyard engine serve`` (and ``python -m rollyard_plugins.embedded_engine``) arguments."""

from __future__ import annotations

import argparse

from rollyard import Command

DEFAULT_MAX_BATCH_SIZE = 64
#: One torch thread: tiny models gain nothing from more, and on a small machine a second
#: thread spin-waits for a core the HTTP side needs (measured: 10-20x slower at 1-16 requests
#: on 2 cores).
DEFAULT_THREADS = 1


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of the embedded engine server."""
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="Hugging Face model folder (e.g. from `rollyard init-model`)")
    parser.add_argument("--port", type=int, default=30000, help="TCP port (default: 30000)")
    parser.add_argument("--host", default="127.0.0.1", help="address (default: 127.0.0.1)")
    parser.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE,
                        help="most sequences decoded together (default: %(default)s)")
    parser.add_argument("--weight-update-policy", choices=("wait", "abort"), default="wait",
                        help="on /update_weights_from_disk, let running requests finish on the "
                             "old weights (wait) or end them with finish reason abort")
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                        help="torch CPU threads for the model; 0 = torch's choice "
                             "(default: %(default)s)")


def serve_from_args(args: argparse.Namespace) -> int:
    """Run the server until SIGINT/SIGTERM; return the exit status."""
    import asyncio
    import pathlib
    import signal
    import sys

    if not (pathlib.Path(args.model) / "config.json").is_file():
        print(f"error: --model {args.model}: no config.json there; build a model with "
              "`rollyard init-model DIR`", file=sys.stderr)
        return 2
    if args.max_batch_size < 1:
        print("error: --max-batch-size must be at least 1", file=sys.stderr)
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
        await serve(args.model, args.host, args.port, args.max_batch_size,
                    args.weight_update_policy, args.threads)

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
                        "/update_weights_from_disk, /flush_cache and /abort_request."))

    def run(self, args: argparse.Namespace) -> int:
        return serve_from_args(args)
