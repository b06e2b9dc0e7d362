"""sglang-router in front of real SGLang, driven by the ``sglang`` transport."""

from __future__ import annotations

import asyncio
import os

from rollyard import GenerateRequest, SamplingParams
from rollyard_plugins.sglang_engine import SGLangRouter
from rollyard_plugins.sglang_transport import SGLangTransport

PROMPT = [1, 282, 201, 398, 428, 347, 485, 2, 201, 1, 280, 201]


def test_router_serves_the_same_greedy_tokens_with_sticky_sessions() -> None:
    engine_url = os.environ["ROLLYARD_TEST_ENGINE_URL"]
    router = SGLangRouter({"python": os.environ["ROLLYARD_SGLANG_PYTHON"],
                           "log_dir": os.environ.get("ROLLYARD_SGLANG_LOG_DIR")})
    handle = router.launch([engine_url])
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)

    async def go() -> tuple:
        direct = SGLangTransport([engine_url])
        routed = SGLangTransport([handle.url])
        try:
            return (await direct.generate(GenerateRequest(PROMPT, greedy)),
                    await asyncio.gather(*(routed.generate(
                        GenerateRequest(PROMPT, greedy, session_id=f"episode-{i % 2}"))
                        for i in range(4))),
                    await routed.health())
        finally:
            await direct.close()
            await routed.close()

    try:
        direct, routed, health = asyncio.run(go())
    finally:
        handle.stop()
    assert all(r.output_ids == direct.output_ids for r in routed)
    assert health == {handle.url: True}
    assert not handle.alive
