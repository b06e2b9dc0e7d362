"""Requests per second through renderer → bridge → embedded engine versus the ``sglang``
transport called directly with the same token ids, at 32 concurrent requests, side by side.

Every path sends the same prompt ids, stop ids, ``max_new_tokens`` and per-request seeds to
one embedded engine serving a freshly built tiny model, so the engine does the same work:

* ``direct``: ``SGLangTransport.generate`` (the baseline);
* ``HTTP face (aiohttp client)``: the prebuilt vLLM body posted to :class:`BridgeServer`;
* ``renderer -> OpenAI client -> HTTP face``: what verifiers 0.4 does (an ``AsyncOpenAI``
  client built from the bridge's base URL); its extra cost over the row above is the OpenAI
  SDK's httpx client, which verifiers owns.

Paths run in a rotating order each round so drift on a shared machine hits all of them; the
medians are compared, for replies of up to 16 and up to 64 new tokens (the table also shows
the mean reply length, which must be equal across paths). Target: bridge/direct >= 0.9.

Usage: ``python benchmarks/verifiers_bridge.py [requests-per-round] [rounds]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

CONCURRENCY = 32
NEW_TOKENS = (16, 64)  # short replies show the per-request overhead; longer ones amortise it
MESSAGES = [{"role": "user", "content": "Count from one to ten, please."}]

Path = Callable[[int], Awaitable[Any]]


async def requests_per_second(path: Path, requests: int) -> tuple[float, float]:
    """Run ``requests`` calls of ``path`` (each returns its number of new tokens), at most
    CONCURRENCY at once; return (calls/s, mean new tokens per call)."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> int:
        async with gate:
            return await path(i)

    started = time.perf_counter()
    tokens = await asyncio.gather(*(one(i) for i in range(requests)))
    return requests / (time.perf_counter() - started), sum(tokens) / requests


async def measure(engine_url: str, model_dir: str, requests: int, rounds: int,
                  max_new_tokens: int) -> None:
    import aiohttp
    from openai import AsyncOpenAI
    from renderers import DefaultRendererConfig, create_renderer
    from renderers.base import load_tokenizer
    from renderers.client import generate
    from rollyard import GenerateRequest, SamplingParams
    from rollyard_plugins.sglang_transport import SGLangTransport
    from rollyard_verifiers.bridge import GENERATE_PATH, Bridge, BridgeServer

    renderer = create_renderer(load_tokenizer(model_dir), DefaultRendererConfig())
    prompt_ids = list(renderer.render(MESSAGES, add_generation_prompt=True).token_ids)
    stop_ids = list(renderer.get_stop_token_ids())
    transport = SGLangTransport([engine_url])
    bridge = Bridge(transport, model="tiny", max_model_len=512)

    def body(i: int) -> dict[str, Any]:
        return {"model": "tiny", "token_ids": prompt_ids,
                "sampling_params": {"max_tokens": max_new_tokens, "seed": i,
                                    "stop_token_ids": stop_ids, "logprobs": 1}}

    async with BridgeServer(bridge) as server, aiohttp.ClientSession() as http:
        openai = AsyncOpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        endpoint = server.base_url.removesuffix("/v1") + GENERATE_PATH

        async def direct(i: int) -> int:
            result = await transport.generate(GenerateRequest(prompt_ids, SamplingParams(
                max_new_tokens=max_new_tokens, stop_token_ids=stop_ids, seed=i)))
            return len(result.output_ids)

        async def http_face(i: int) -> int:
            async with http.post(endpoint, json=body(i)) as response:
                return len((await response.json())["choices"][0]["token_ids"])

        async def openai_http_face(i: int) -> int:
            result = await generate(client=openai, renderer=renderer, messages=MESSAGES,
                                    model="tiny",
                                    sampling_params={"max_tokens": max_new_tokens, "seed": i},
                                    extra_headers={"X-Session-ID": f"s{i}"})
            return len(result["completion_ids"])

        paths: dict[str, Path] = {
            "direct": direct, "HTTP face (aiohttp client)": http_face,
            "renderer -> OpenAI client -> HTTP face": openai_http_face}
        names = list(paths)
        for name in names:  # warm-up: connections, tokenizer caches
            await requests_per_second(paths[name], CONCURRENCY)
        rates: dict[str, list[float]] = {name: [] for name in names}
        lengths: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                rate, length = await requests_per_second(paths[name], requests)
                rates[name].append(rate)
                lengths[name].append(length)
        await openai.close()
    await transport.close()
    base = statistics.median(rates["direct"])
    print(f"{requests} requests per round, {CONCURRENCY} concurrent, {rounds} rounds, "
          f"prompt {len(prompt_ids)} tokens, up to {max_new_tokens} new tokens")
    print(f"{'path':<40} {'median req/s':>12} {'vs direct':>10} {'new tokens/req':>15}")
    for name in names:
        median = statistics.median(rates[name])
        print(f"{name:<40} {median:12.1f} {median / base:10.2f} "
              f"{statistics.mean(lengths[name]):15.1f}")
    print("target: bridge/direct >= 0.9\n")


async def measure_all(engine_url: str, model_dir: str, requests: int, rounds: int) -> None:
    """Every reply length in one event loop (renderers keeps loop-bound module state)."""
    for max_new_tokens in NEW_TOKENS:
        await measure(engine_url, model_dir, requests, rounds, max_new_tokens)


def main() -> int:
    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 7
    from rollyard.models.tiny import build_tiny_model
    from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(build_tiny_model(tmp))
        handle = EmbeddedEngine().launch(model_dir, 0)
        try:
            asyncio.run(measure_all(handle.url, model_dir, requests, rounds))
        finally:
            handle.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
