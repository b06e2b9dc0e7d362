"""``--partial-rollouts`` against real SGLang: a push aborts the running generations first and
updates after, and each generation goes on from its tokens once the engine serves the new
version. It moves the engine's weight version on; the contract suite, which checks versions,
runs before it."""

from __future__ import annotations

import asyncio
import os

from rollyard import GenerateRequest, SamplingParams
from rollyard.run.partial_rollouts import ResumingTransport
from rollyard_plugins.sglang_transport import SGLangTransport

PROMPT = [1, 282, 201, 398, 428, 347, 485, 2, 201, 1, 280, 201]
LONG = 400


def test_pushes_that_abort_leave_every_generation_whole() -> None:
    url, model_dir = os.environ["ROLLYARD_TEST_ENGINE_URL"], os.environ["ROLLYARD_TEST_MODEL_DIR"]
    request = GenerateRequest(PROMPT, SamplingParams(max_new_tokens=LONG, min_new_tokens=LONG))

    async def go() -> list:
        rollout, driver = ResumingTransport(SGLangTransport([url])), SGLangTransport([url])
        rounds = []
        try:
            start = (await driver.weight_versions())[url]
            for version in range(start + 1, start + 4):
                batch = asyncio.ensure_future(rollout.generate_batch([request] * 4))
                await asyncio.sleep(0.5)
                pushed_while_generating = not batch.done()
                # the same weights under a new version: what is checked is the protocol
                await driver.update_weights(model_dir, version, abort_running=True)
                rounds.append((version, pushed_while_generating, await batch,
                               rollout.take_counts()))
        finally:
            await rollout.close()
            await driver.close()
        return rounds

    for version, pushed_while_generating, results, (generations, resumed) in asyncio.run(go()):
        assert pushed_while_generating
        assert [len(r.output_ids) for r in results] == [LONG] * 4
        assert all(len(r.logprobs) == LONG and r.finish_reason == "length" for r in results)
        # sampled from the version before the push on (the oldest that sampled a token)
        assert {r.weight_version for r in results} == {version - 1}
        assert generations == 4 and resumed == 4
