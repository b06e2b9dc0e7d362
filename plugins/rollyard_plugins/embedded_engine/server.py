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
from rollyard.bearer import bearer_middleware
from rollyard.episodes.prompts import render_prompt
from rollyard.weight_transfer import specs_from_body

from rollyard_plugins.embedded_engine.model_runner import ModelRunner
from rollyard_plugins.embedded_engine.openai_chat import chat_completion, chat_to_generate
from rollyard_plugins.embedded_engine.options import EmbeddedOptions
from rollyard_plugins.embedded_engine.protocol import (
    BadRequest,
    ParsedPrompt,
    format_result,
    parse_generate,
)
from rollyard_plugins.embedded_engine.scheduler import Scheduler, Sequence
from rollyard_plugins.embedded_engine.weight_update import (
    GroupError,
    WeightUpdateGroups,
    in_daemon_thread,
)

log = logging.getLogger("rollyard.embedded_engine")


def _error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


class EngineServer:
    """Routes SGLang's endpoints to one model and its scheduler."""

    def __init__(self, model_dir: str, max_batch_size: int = EmbeddedOptions.max_batch_size,
                 weight_update_policy: str = "wait",
                 threads: int = EmbeddedOptions.threads,
                 weight_sync_timeout: float = EmbeddedOptions.weight_sync_timeout,
                 dtype: str = EmbeddedOptions.dtype, api_key: str | None = None) -> None:
        from transformers import AutoTokenizer

        self.api_key = api_key
        self.model_dir = str(pathlib.Path(model_dir).resolve())
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.scheduler = Scheduler(lambda: ModelRunner(self.model_dir, max_batch_size, dtype),
                                   max_batch_size, weight_update_policy=weight_update_policy,
                                   threads=threads)
        self.runner = self.scheduler.start()
        self.groups = WeightUpdateGroups(weight_sync_timeout)
        self._update_session = False

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2, middlewares=[
            bearer_middleware(self.api_key, open_paths=("/health", "/health_generate"))])
        app.add_routes([
            web.post("/generate", self.generate), web.put("/generate", self.generate),
            web.get("/health", self.health), web.get("/health_generate", self.health),
            web.get("/get_model_info", self.model_info), web.get("/model_info", self.model_info),
            web.get("/get_server_info", self.server_info),
            web.get("/server_info", self.server_info),
            web.get("/get_weight_version", self.weight_version),
            web.post("/update_weights_from_disk", self.update_weights_from_disk),
            web.post("/init_weights_update_group", self.init_weights_update_group),
            web.post("/destroy_weights_update_group", self.destroy_weights_update_group),
            web.post("/update_weights_from_distributed", self.update_weights_from_distributed),
            web.post("/begin_weight_update", self.begin_weight_update),
            web.post("/end_weight_update", self.end_weight_update),
            web.route("*", "/flush_cache", self.flush_cache),
            web.post("/abort_request", self.abort_request),
            web.post("/v1/chat/completions", self.chat_completions),
            web.get("/v1/models", self.models),
        ])
        app.on_cleanup.append(self._stop)
        return app

    async def _stop(self, app: web.Application) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.scheduler.stop)
        self.groups.close()

    # ------------------------------------------------------------------ endpoints

    async def generate(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(f"the request body is not valid JSON: {exc}")
        try:
            prompts, batch = self._parse(body)
        except BadRequest as exc:
            return _error(str(exc))
        results = await self._run(prompts)
        return web.json_response(results if batch else results[0])

    async def chat_completions(self, request: web.Request) -> web.Response:
        """OpenAI's chat completions over the served model (see :mod:`.openai_chat`)."""
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _error(f"the request body is not valid JSON: {exc}")
        try:
            prompts, _ = self._parse(chat_to_generate(body, self._chat_template))
        except BadRequest as exc:
            return _error(str(exc))
        results = await self._run(prompts)
        return web.json_response(chat_completion(results, str(body.get("model") or
                                                               self.model_dir)))

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": self.model_dir, "object": "model", "owned_by": "rollyard"}]})

    def _parse(self, body: Any) -> tuple[list[ParsedPrompt], bool]:
        return parse_generate(body, self.runner.vocab_size, self.runner.context_len,
                              self._tokenize)

    async def _run(self, prompts: list[ParsedPrompt]) -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        started = [self._sequence(p, loop) for p in prompts]
        # a batch reaches the scheduler whole, so a shared prompt is prefilled once
        self.scheduler.submit(*(seq for seq, _ in started))
        return list(await asyncio.gather(*(self._answer(p, seq, done)
                                           for p, (seq, done) in zip(prompts, started))))

    @staticmethod
    def _sequence(prompt: ParsedPrompt, loop: asyncio.AbstractEventLoop,
                  ) -> tuple[Sequence, asyncio.Future[Sequence]]:
        done: asyncio.Future[Sequence] = loop.create_future()

        def on_done(seq: Sequence) -> None:
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(seq))

        return Sequence(prompt.rid, prompt.input_ids, prompt.options, on_done), done

    async def _answer(self, prompt: ParsedPrompt, seq: Sequence,
                      done: asyncio.Future[Sequence]) -> dict[str, Any]:
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
            # one rank in a weight-update group; /update_weights_from_distributed works
            # without SGLang 0.5.23's /begin_weight_update ... /end_weight_update session
            "tp_size": 1, "weight_update_session_required": False,
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

    # ------------------------------------------------------------------ distributed update

    async def init_weights_update_group(self, request: web.Request) -> web.Response:
        """Join the trainer's weight-update group (blocks until it forms or times out)."""
        try:
            body = await request.json()
            message = await asyncio.wrap_future(
                in_daemon_thread(lambda: self.groups.init(body), "weight-group-join"))
        except json.JSONDecodeError as exc:
            return _error(f"the request body is not valid JSON: {exc}")
        except GroupError as exc:
            return web.json_response({"success": False, "message": str(exc)}, status=400)
        return web.json_response({"success": True, "message": message})

    async def destroy_weights_update_group(self, request: web.Request) -> web.Response:
        try:
            body = await request.json() if request.can_read_body else {}
        except json.JSONDecodeError as exc:
            return _error(f"the request body is not valid JSON: {exc}")
        name = body.get("group_name", "weight_update_group") if isinstance(body, dict) else None
        if not isinstance(name, str):
            return _error(f"group_name must be a string, got {name!r}")
        try:
            await asyncio.to_thread(self.groups.destroy, name)
        except GroupError as exc:
            return web.json_response({"success": False, "message": str(exc)}, status=400)
        return web.json_response({"success": True,
                                  "message": "Succeeded to destroy custom process group."})

    async def update_weights_from_distributed(self, request: web.Request) -> web.Response:
        """Receive the announced tensors from the group's rank 0 and serve them.

        SGLang 0.5.23 wants the call inside /begin_weight_update ... /end_weight_update; the
        embedded engine accepts it either way.
        """
        def failed(message: str) -> web.Response:
            return web.json_response({"success": False, "message": message}, status=400)

        try:
            body = await request.json()
        except json.JSONDecodeError as exc:
            return _error(f"the request body is not valid JSON: {exc}")
        try:
            specs, load_format = specs_from_body(body)
        except ValueError as exc:
            return _error(str(exc))
        name = body.get("group_name", "weight_update_group")
        version = body.get("weight_version")
        if version is not None and not isinstance(version, (str, int)):
            return _error(f"weight_version must be a string, got {version!r}")
        abort = body.get("abort_all_requests", False)
        if not isinstance(abort, bool) or not isinstance(body.get("flush_cache", True), bool):
            return _error("abort_all_requests and flush_cache must be true or false")
        if abort:
            self.scheduler.abort(None)

        def apply(received: list) -> tuple[bool, str]:
            # on the receive thread, straight after the broadcast: no hop through the loop
            future = self.scheduler.load_tensors(
                received, f"update from group {name!r}",
                self.scheduler.weight_version if version is None else str(version),
                abort_running=abort or None)
            return future.result()

        try:
            success, message = await asyncio.wrap_future(
                self.groups.receive(specs, name, load_format, then=apply))
        except GroupError as exc:
            return failed(str(exc))
        except Exception as exc:  # the broadcast failed or timed out
            return failed(f"Failed to receive weights: {type(exc).__name__}: {exc}")
        if not success:
            return failed(message)
        message = "Succeeded to update parameter online."
        if version is not None:
            message += f" Weight version updated to {version}."
        return web.json_response({"success": True, "message": message})

    async def begin_weight_update(self, request: web.Request) -> web.Response:
        if self._update_session:
            return web.json_response({"success": False, "message": "a weight-update session "
                                      "is already open; call end_weight_update() first"},
                                     status=400)
        self._update_session = True
        return web.json_response({"success": True, "message": "Success"})

    async def end_weight_update(self, request: web.Request) -> web.Response:
        if not self._update_session:
            return web.json_response({"success": False, "message": "no weight-update session "
                                      "is open; call begin_weight_update() first"}, status=400)
        self._update_session = False
        return web.json_response({"success": True, "message": "Success"})

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

    def _chat_template(self, messages: list[dict[str, Any]]) -> list[int]:
        return render_prompt(self.tokenizer, messages)  # type: ignore[arg-type]

    def _detokenize(self, seq: Sequence) -> str:
        ids = seq.output
        if (seq.finish_reason or {}).get("type") == "stop" and not seq.options.no_stop_trim:
            ids = ids[:-1]
        return self.tokenizer.decode(ids, skip_special_tokens=seq.options.skip_special_tokens)


async def serve(model_dir: str, host: str, port: int,
                max_batch_size: int = EmbeddedOptions.max_batch_size,
                weight_update_policy: str = "wait",
                threads: int = EmbeddedOptions.threads,
                weight_sync_timeout: float = EmbeddedOptions.weight_sync_timeout,
                dtype: str = EmbeddedOptions.dtype, api_key: str | None = None) -> None:
    """Load the model, then serve until cancelled (``api_key``: the bearer token every
    request but the health checks needs). Prints one ``ready`` line when listening."""
    server = EngineServer(model_dir, max_batch_size, weight_update_policy, threads,
                          weight_sync_timeout, dtype, api_key)
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
