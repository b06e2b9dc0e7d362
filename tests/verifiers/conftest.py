"""Fixtures for the verifiers bridge: a tiny local model, its renderer, a transport fake."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rollyard import GenerateRequest, GenerateResult, Transport

ENVS = Path(__file__).parent / "envs"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A freshly built tiny Qwen3 model with its ChatML tokenizer (nothing downloaded)."""
    from rollyard.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("verifiers-model"))


@pytest.fixture(scope="session")
def renderer(tiny_model_dir: Path) -> Any:
    """The renderer verifiers' train client would build for the tiny model."""
    from renderers import DefaultRendererConfig, create_renderer
    from renderers.base import load_tokenizer

    return create_renderer(load_tokenizer(str(tiny_model_dir)), DefaultRendererConfig())


@pytest.fixture
def test_envs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Put the verifiers environments shipped with these tests on ``sys.path``."""
    monkeypatch.syspath_prepend(str(ENVS))
    yield ENVS


class ScriptedTransport(Transport):
    """Stands in for the engines: answers every request with ``result`` and keeps the
    requests it was sent."""

    name = "scripted"

    def __init__(self, result: GenerateResult | Exception) -> None:
        super().__init__(["scripted://engine"])
        self.result = result
        self.requests: list[GenerateRequest] = []

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.requests.append(request)
        if isinstance(self.result, Exception):
            raise self.result
        return self.result


@pytest.fixture(scope="session")
def engine_url(tiny_model_dir: Path) -> Iterator[str]:
    """The embedded engine serving the tiny model, as a real subprocess on loopback."""
    from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine

    handle = EmbeddedEngine({"threads": 1}).launch(str(tiny_model_dir), 0)
    try:
        yield handle.url
    finally:
        handle.stop()


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
