"""The HTTP side of the embedded engine: SGLang's native endpoints on aiohttp.

Requests are validated (HTTP 400 naming the field), handed to the :class:`Scheduler` thread
and answered when their sequence finishes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pathlib
import time
from typing import Any

from aiohttp import web

from rollyard_plugins.embedded_engine.model_runner import ModelRunner
from rollyard_plugins.embedded_engine.options import EmbeddedOptions
from rollyard_plugins.embedded_engine.protocol import (
    BadRequest,
    ParsedPrompt,
    format_result,
    parse_generate,
)
from rollyard_plugins.embedded_engine.scheduler import Scheduler, Sequence

log = logging.getLogger("rollyard.embedded_engine")


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


class EngineServer:
    """Routes SGLang's endpoints to one model and its scheduler."""

    def __init__(self, model_dir: str, max_batch_size: int = EmbeddedOptions.max_batch_size,
                 weight_update_policy: str = "wait",
                 threads: int = EmbeddedOptions.threads) -> None:
        from transformers import AutoTokenizer

        self.model_dir = str(pathlib.Path(model_dir).resolve())
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.scheduler = Scheduler(lambda: ModelRunner(self.model_dir, max_batch_size),
                                   max_batch_size, weight_update_policy=weight_update_policy,
                                   threads=threads)
        self.runner = self.scheduler.start()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        app.add_routes([
            web.post("/generate", self.generate), web.put("/generate", self.generate),
            web.get("/health", self.health), web.get("/health_generate", self.health),
            web.get("/get_model_info", self.model_info), web.get("/model_info", self.model_info),
            web.get("/get_server_info", self.server_info),
            web.get("/get_weight_version", self.weight_version),
            web.post("/update_weights_from_disk", self.update_weights_from_disk),
            web.route("*", "/flush_cache", self.flush_cache),
            web.post("/abort_request", self.abort_request),
        ])
        app.on_cleanup.append(self._stop)
        return app

    async def _stop(self, app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.scheduler.stop)

    # ------------------------------------------------------------------ endpoints

    async def generate(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(f"the request body is not valid JSON: {exc}")
        try:
            prompts, batch = parse_generate(body, self.runner.vocab_size, self.runner.context_len,
                                            self._tokenize)
        except BadRequest as exc:
            return _error(str(exc))
        results = await asyncio.gather(*(self._run(p) for p in prompts))
        return web.json_response(results if batch else results[0])

    async def _run(self, prompt: ParsedPrompt) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Sequence] = loop.create_future()

        def on_done(seq: Sequence) -> None:
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(seq))

        seq = Sequence(prompt.rid, prompt.input_ids, prompt.options, on_done)
        self.scheduler.submit(seq)
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:  # the client went away: free its slot
            self.scheduler.abort(seq.rid)
            raise
        return format_result(seq.output, seq.logprobs, seq.finish_reason or {}, seq.rid,
                             len(seq.prompt), seq.weight_version, self._detokenize(seq),
                             prompt.return_logprob, time.monotonic() - seq.started)

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def model_info(self, request: web.Request) -> web.Response:
        config = self.runner.config
        return web.json_response({
            "model_path": self.runner.model_dir, "tokenizer_path": self.model_dir,
            "is_generation": True, "preferred_sampling_params": None,
            "weight_version": self.scheduler.weight_version,
            "model_type": config.model_type, "architectures": config.architectures})

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response({
            "model_path": self.runner.model_dir, "context_length": self.runner.context_len,
            "vocab_size": self.runner.vocab_size,
            "weight_update_policy": self.scheduler.weight_update_policy,
            "weight_version": self.scheduler.weight_version, **self.scheduler.load,
            **self.scheduler.stats})

    async def weight_version(self, request: web.Request) -> web.Response:
        return web.json_response({"weight_version": self.scheduler.weight_version})

    async def update_weights_from_disk(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return _error(f"the request body is not valid JSON: {exc}")
        if not isinstance(body, dict) or not isinstance(body.get("model_path"), str):
            return _error("model_path (a string) is required")
        version = body.get("weight_version")
        if version is not None and not isinstance(version, (str, int)):
            return _error(f"weight_version must be a string, got {version!r}")
        abort = body.get("abort_all_requests")
        if abort is not None and not isinstance(abort, bool):
            return _error(f"abort_all_requests must be true or false, got {abort!r}")
        future = self.scheduler.update_weights(
            body["model_path"],
            self.scheduler.weight_version if version is None else str(version),
            abort_running=abort)
        success, message = await asyncio.wrap_future(future)
        return web.json_response(
            {"success": success, "message": message, "num_paused_requests": 0},
            status=200 if success else 400)

    async def flush_cache(self, request: web.Request) -> web.Response:
        return web.Response(text="Cache flushed.\n")

    async def abort_request(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return _error(f"the request body is not valid JSON: {exc}")
        if not isinstance(body, dict):
            return _error("the request body must be a JSON object")
        if body.get("abort_all"):
            self.scheduler.abort(None)
        elif isinstance(body.get("rid"), str) and body["rid"]:
            self.scheduler.abort(body["rid"])
        else:
            return _error("give rid (a string) or abort_all: true")
        return web.Response(status=200)

    # ------------------------------------------------------------------ text

    def _tokenize(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _detokenize(self, seq: Sequence) -> str:
        ids = seq.output
        if (seq.finish_reason or {}).get("type") == "stop" and not seq.options.no_stop_trim:
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=seq.options.skip_special_tokens)


async def serve(model_dir: str, host: str, port: int,
                max_batch_size: int = EmbeddedOptions.max_batch_size,
                weight_update_policy: str = "wait",
                threads: int = EmbeddedOptions.threads) -> None:
    """Load the model, then serve until cancelled. Prints one ``ready`` line when listening."""
    server = EngineServer(model_dir, max_batch_size, weight_update_policy, threads)
    # handler_cancellation: a client that hangs up (e.g. a transport timeout) frees its slot.
    runner = web.AppRunner(server.app(), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    print(f"rollyard embedded engine ready on http://{host}:{port} (model {model_dir})",
          flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
