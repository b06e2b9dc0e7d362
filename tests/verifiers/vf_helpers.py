"""Helpers shared by the verifiers tests: a fake SGLang server, a renderer request. (A scripted
transport is ``rollyard.testing.ScriptedTransport``.)"""

from __future__ import annotations

from typing import Any

#: What verifiers 0.4's train client posts for a second turn (renderers adds the last three).
RENDERER_BODY = {
    "model": "tiny", "token_ids": [1, 87, 85, 266, 201],
    "sampling_params": {"temperature": 0.7, "top_p": 0.9, "top_k": 0, "max_tokens": 16,
                        "seed": 11, "n": 1, "min_tokens": 0, "routed_experts_prompt_start": 3,
                        "stop_token_ids": [2], "logprobs": 1, "skip_special_tokens": False},
    "cache_salt": "abc", "priority": 0,
}


class FakeSGLang:
    """A loopback HTTP server speaking SGLang's ``/generate``: records each request (path,
    headers, JSON body) and answers with ``reply`` (a JSON object) or ``status``."""

    def __init__(self, reply: dict[str, Any], status: int = 200) -> None:
        self.reply = reply
        self.status = status
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.url = ""

    async def __aenter__(self) -> FakeSGLang:
        from aiohttp import web

        async def generate(request: web.Request) -> web.Response:
            self.requests.append((request.path, dict(request.headers), await request.json()))
            return web.json_response(self.reply, status=self.status)

        app = web.Application()
        app.router.add_post("/generate", generate)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()
