"""``--partial-rollouts``: a weight push aborts the engine's running generations, and each goes
on from the tokens it had, on the new weights. Against the embedded engine, with both weight
syncs; the resuming logic alone against a scripted engine; and the options' errors."""

from __future__ import annotations

import argparse
import asyncio
import statistics

import pytest
from rollyard import (
    ConfigError,
    EngineAborted,
    GenerateRequest,
    GenerateResult,
    SamplingParams,
    Transport,
    TransportError,
)
from rollyard.config import RunConfig
from rollyard.run.engines import EngineFleet
from rollyard.run.partial_rollouts import MAX_RESUMES, ResumingTransport
from rollyard.run.weight_push import make_weight_sync
from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine
from rollyard_plugins.sglang_transport import SGLangTransport, parse_generate_response
from test_weight_sync import PROMPT, InProcessTrainer
from test_weight_sync import fleet as fleet  # the fixture: one embedded engine

LONG = 480  # new tokens: long enough that the push lands while it is generated


@pytest.mark.parametrize("mode", ["disk", "distributed"])
def test_a_push_aborts_a_running_generation_which_goes_on_with_the_new_weights(
        fleet, tiny_model_dir, other_model_dir, teacher_forced, http, tmp_path, mode) -> None:
    trainer = InProcessTrainer(tiny_model_dir, other_model_dir)
    sync = make_weight_sync(mode, tmp_path / "run", fleet, trainer, abort_running=True)
    request = GenerateRequest(PROMPT, SamplingParams(max_new_tokens=LONG, min_new_tokens=LONG,
                                                     seed=5))

    async def go() -> tuple:
        transport = ResumingTransport(SGLangTransport(fleet.urls))
        try:
            if mode == "distributed":  # the group forms now, not while the push is timed
                await sync.connect(transport.inner)
            generation = asyncio.ensure_future(transport.generate(request))
            while (await asyncio.to_thread(http, fleet.urls[0], "/get_server_info"))[1][
                    "running"] == 0:
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)  # it is generating on version 0
            trainer.train(1)
            await sync.push(transport.inner, 1)
            pushed_while_generating = not generation.done()
            result = await generation
            return result, pushed_while_generating, transport.take_counts()
        finally:
            await sync.close(transport.inner)
            await transport.close()

    result, pushed_while_generating, counts = asyncio.run(go())
    assert pushed_while_generating  # the push did not wait for the generation to end
    assert result.finish_reason == "length" and len(result.output_ids) == LONG
    assert len(result.logprobs) == LONG
    assert result.weight_version == 0  # the oldest weights it was sampled with
    assert counts == (1, 1)
    # the first tokens were sampled by the initial weights, the rest by the new ones: each
    # logprob is that of one model (to the end-of-text token's share, which min_new_tokens
    # masks out), and the two models differ by ~1 nat per token
    old = teacher_forced(tiny_model_dir, PROMPT, result.output_ids, 1.0)
    new = teacher_forced(other_model_dir, PROMPT, result.output_ids, 1.0)
    off_old = [abs(lp - o) for lp, o in zip(result.logprobs, old)]
    off_new = [abs(lp - n) for lp, n in zip(result.logprobs, new)]
    # where the weights changed: the split that fits the two models best
    split = min(range(LONG + 1), key=lambda k: sum(off_old[:k]) + sum(off_new[k:]))
    assert 0 < split < LONG
    assert statistics.median(off_old[:split]) < 0.01 and statistics.median(off_new[split:]) < 0.01
    assert statistics.median(off_new[:split]) > 0.1 and statistics.median(off_old[split:]) > 0.1


def test_an_abort_gives_back_requests_that_had_not_started_too(tiny_model_dir,
                                                               tmp_path) -> None:
    # one slot: the second request waits, never sampled, when everything is aborted
    engine = EmbeddedEngine({"log_dir": str(tmp_path), "max_batch_size": 1})
    request = GenerateRequest(PROMPT, SamplingParams(max_new_tokens=LONG, min_new_tokens=LONG))

    async def go(url: str) -> list:
        transport = SGLangTransport([url])
        try:
            running = [asyncio.ensure_future(transport.generate(request)) for _ in range(2)]
            await asyncio.sleep(0.3)
            await transport.abort_all()
            return await asyncio.gather(*running, return_exceptions=True)
        finally:
            await transport.close()

    with EngineFleet(engine, str(tiny_model_dir), 1) as fleet:
        fleet.start()
        first, second = asyncio.run(go(fleet.urls[0]))
    assert isinstance(first, EngineAborted) and isinstance(second, EngineAborted)
    assert first.partial.output_ids and first.partial.weight_version == 0
    assert second.partial == GenerateResult([], [], "abort", 0)


def test_a_request_aborted_before_it_started_takes_the_version_that_sampled_it() -> None:
    inner = Scripted([aborted([], 3), GenerateResult([6, 7], [-0.5, -0.5], "stop", 4)])
    result = asyncio.run(ResumingTransport(inner).generate(GenerateRequest([1])))
    assert result == GenerateResult([6, 7], [-0.5, -0.5], "stop", 4)


def test_an_aborted_response_carries_what_was_generated() -> None:
    body = {"output_ids": [7, 8], "meta_info": {
        "finish_reason": {"type": "abort", "message": "aborted for a weight update"},
        "output_token_logprobs": [[-0.5, 7, None], [-1.5, 8, None]],
        "completion_tokens": 2, "weight_version": "3"}}
    with pytest.raises(EngineAborted, match="aborted for a weight update") as caught:
        parse_generate_response(body, "http://e")
    assert caught.value.partial == GenerateResult([7, 8], [-0.5, -1.5], "abort", 3)
    body["meta_info"]["completion_tokens"] = 5  # malformed: no partial, still an abort
    with pytest.raises(EngineAborted) as caught:
        parse_generate_response(body, "http://e")
    assert caught.value.partial is None


class Scripted(Transport):
    """An engine whose answers are scripted, one per generate call; records the requests."""

    name = "scripted"

    def __init__(self, answers: list) -> None:
        super().__init__(["http://scripted"])
        self.answers, self.requests = list(answers), []

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    async def health(self) -> dict[str, bool]:
        return {}

    async def weight_versions(self) -> dict[str, int]:
        return {}

    async def update_weights(self, model_dir: str, weight_version: int) -> None:
        pass


def aborted(tokens: list[int], version: int) -> EngineAborted:
    return EngineAborted("aborted", partial=GenerateResult(tokens, [-1.0] * len(tokens),
                                                           "abort", version))


def test_a_resumed_request_asks_for_what_is_left_and_joins_the_pieces() -> None:
    inner = Scripted([aborted([5, 6], 2), aborted([7], 3),
                      GenerateResult([8, 9], [-0.1, -0.2], "stop", 4)])
    request = GenerateRequest([1, 2], SamplingParams(max_new_tokens=10, min_new_tokens=4,
                                                     seed=11), session_id="s")
    result = asyncio.run(ResumingTransport(inner).generate(request))
    assert result == GenerateResult([5, 6, 7, 8, 9], [-1.0, -1.0, -1.0, -0.1, -0.2], "stop", 2)
    second, third = inner.requests[1:]
    assert second.input_ids == [1, 2, 5, 6] and third.input_ids == [1, 2, 5, 6, 7]
    assert (second.sampling.max_new_tokens, second.sampling.min_new_tokens,
            second.sampling.seed) == (8, 2, 13)
    assert (third.sampling.max_new_tokens, third.sampling.min_new_tokens) == (7, 1)
    assert third.session_id == "s" and request.input_ids == [1, 2]  # the caller's is kept


def test_a_resume_waits_until_the_engine_serves_newer_weights() -> None:
    class Updating(Scripted):
        """The engine is at version 0 for its first two answers to weight_versions."""

        looks = 0
        looks_at_generate: list[int] = []

        async def weight_versions(self) -> dict[str, int]:
            self.looks += 1
            return {self.urls[0]: 0 if self.looks < 3 else 1}

        async def generate(self, request: GenerateRequest) -> GenerateResult:
            self.looks_at_generate.append(self.looks)
            return await super().generate(request)

    partial = GenerateResult([5], [-1.0], "abort", 0)
    inner = Updating([EngineAborted("aborted", url="http://scripted", partial=partial),
                      GenerateResult([6], [-0.5], "stop", 1)])
    result = asyncio.run(ResumingTransport(inner).generate(GenerateRequest([1])))
    assert result == GenerateResult([5, 6], [-1.0, -0.5], "stop", 0)
    assert inner.looks_at_generate == [0, 3]  # resent once the engine served version 1


def test_an_abort_at_the_token_budget_is_a_length_result() -> None:
    inner = Scripted([aborted([5, 6, 7], 1)])
    result = asyncio.run(ResumingTransport(inner).generate(
        GenerateRequest([1], SamplingParams(max_new_tokens=3))))
    assert result == GenerateResult([5, 6, 7], [-1.0] * 3, "length", 1)
    assert len(inner.requests) == 1


def test_an_abort_without_output_or_one_that_keeps_coming_is_given_back() -> None:
    plain = EngineAborted("engine shutting down")
    with pytest.raises(EngineAborted, match="shutting down"):
        asyncio.run(ResumingTransport(Scripted([plain])).generate(GenerateRequest([1])))
    inner = Scripted([aborted([5], 0) for _ in range(MAX_RESUMES + 1)])
    with pytest.raises(EngineAborted):
        asyncio.run(ResumingTransport(inner).generate(
            GenerateRequest([1], SamplingParams(max_new_tokens=100))))
    assert len(inner.requests) == 1 + MAX_RESUMES  # the first try and every resume


def test_a_batch_resumes_its_aborted_requests_and_keeps_the_others() -> None:
    failed = TransportError("malformed", url="http://scripted")
    inner = Scripted([GenerateResult([4], [-0.3], "stop", 1), aborted([5], 0), failed,
                      GenerateResult([6], [-0.4], "stop", 1)])
    transport = ResumingTransport(inner)
    requests = [GenerateRequest([1], SamplingParams(max_new_tokens=4)) for _ in range(3)]
    results = asyncio.run(transport.generate_batch(requests, return_exceptions=True))
    assert results[0] == GenerateResult([4], [-0.3], "stop", 1)
    assert results[1] == GenerateResult([5, 6], [-1.0, -0.4], "stop", 0)
    assert results[2] is failed
    assert transport.take_counts() == (3, 1) and transport.take_counts() == (0, 0)
    inner = Scripted([GenerateResult([4], [-0.3], "stop", 1), failed])
    with pytest.raises(TransportError, match="malformed"):
        asyncio.run(ResumingTransport(inner).generate_batch(requests[:2]))


def test_partial_rollouts_need_async() -> None:
    with pytest.raises(ConfigError, match="--partial-rollouts without --async"):
        RunConfig(partial_rollouts=True)
    assert RunConfig(partial_rollouts=True, async_rollout=True).partial_rollouts


def test_partial_rollouts_need_a_transport_that_can_resume(plugin_manager,
                                                           monkeypatch) -> None:
    from rollyard.run.driver import PluginSelection
    from rollyard.train_flags import TrainFlags

    plugin_manager.load_for_run(RunConfig().wanted_plugins())
    config = TrainFlags(argparse.ArgumentParser(), plugin_manager).parse(
        ["--async", "--partial-rollouts"])
    PluginSelection(config, plugin_manager)  # the sglang transport can
    monkeypatch.setattr(SGLangTransport, "supports_partial_rollouts", False)
    with pytest.raises(ConfigError, match="--partial-rollouts: transport 'sglang' cannot"):
        PluginSelection(config, plugin_manager)
