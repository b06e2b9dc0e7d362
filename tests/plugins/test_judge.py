"""The ``judge`` reward against a scripted OpenAI-compatible server (exact scores, retries,
failures, the cache, the API key) and against the embedded engine's /v1/chat/completions."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from rollyard import RewardContext, Sample, SampleStatus, Task
from rollyard.errors import ConfigError
from rollyard.options import construct_options
from rollyard.rewards import RewardSet
from rollyard_plugins.judge.options import PREFIX, JudgeOptions
from rollyard_plugins.judge.plugin import JudgeReward
from rollyard_plugins.judge.template import JudgeTemplate, parse_score

TASK = Task(id="sum", prompt=[{"role": "user", "content": "What is 2+3?"}], data={"answer": "5"})

#: What the scripted judge does for a reply to grade: ("reply", text), ("status", code) once
#: before answering, ("hang", seconds).
Script = Callable[[str], tuple[str, Any]]


def sample(completion: str) -> Sample:
    return Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[-0.5], task_id="sum",
                  metadata={"completion": completion})


def reward(**options: Any) -> JudgeReward:
    values = {"model": "judge-1", "retries": 2, "timeout": 2.0, **options}
    return JudgeReward(RewardContext(tokenizer=None,
                                     options=construct_options(JudgeOptions, PREFIX, values)))


class ScriptedJudge:
    """An OpenAI chat endpoint whose reply depends on the graded response in the prompt."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.failures_left: dict[str, int] = {}

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append({"body": body, "auth": request.headers.get("Authorization")})
        content = body["messages"][0]["content"]
        graded = content.split("Reply to grade:\n", 1)[1].split("\n\nJudge how", 1)[0]
        if graded.startswith("flaky"):
            left = self.failures_left.setdefault(graded, 2)
            if left:
                self.failures_left[graded] = left - 1
                return web.json_response({"error": "busy"}, status=503,
                                         headers={"Retry-After": "0"})
            return _completion("it is fine\nSCORE: 0.5")
        if graded == "forbidden":
            return web.json_response({"error": "no"}, status=401)
        if graded == "slow":
            await asyncio.sleep(30)
        replies = {"5": "Correct: 2+3 is 5.\n**SCORE: 1**", "6": "Wrong.\nSCORE: 0",
                   "five": "score: 0.25\nnear enough\nSCORE: 0.75",
                   "none": "I cannot grade this.", "big": "SCORE: 7"}
        return _completion(replies[graded])


def _completion(text: str) -> web.Response:
    return web.json_response({"id": "x", "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text},
         "finish_reason": "stop"}]})


@contextlib.asynccontextmanager
async def scripted_server() -> AsyncIterator[tuple[str, ScriptedJudge]]:
    judge = ScriptedJudge()
    app = web.Application()
    app.add_routes([web.post("/v1/chat/completions", judge.chat)])
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/v1", judge
    finally:
        await runner.cleanup()


async def judged(completions: list[str], **options: Any,
                 ) -> tuple[list[Sample], ScriptedJudge, dict[str, float]]:
    async with scripted_server() as (url, judge):
        rewards = RewardSet({"judge": reward(base_url=url, **options)}, {"judge": 1.0})
        samples = [sample(c) for c in completions]
        await rewards.score_group(samples, TASK)
        metrics = rewards.metrics()
        await rewards.close()
    return samples, judge, metrics


def test_scores_are_read_from_the_last_score_line_and_bad_replies_fail_only_their_sample():
    samples, judge, metrics = asyncio.run(judged(["5", "6", "five", "none", "big"]))
    assert [s.rewards.get("judge") for s in samples] == [1.0, 0.0, 0.75, 0.0, 0.0]
    assert [s.status for s in samples[:3]] == [SampleStatus.COMPLETED] * 3
    for failed, reply in ((samples[3], "I cannot grade this."), (samples[4], "SCORE: 7")):
        assert failed.status is SampleStatus.FAILED
        assert "SCORE: <number between 0 and 1>" in failed.metadata["failure"]
        assert failed.metadata["judge"] == {"reply": reply, "score": None}
    assert samples[2].metadata["judge"]["score"] == 0.75
    sent = judge.requests[0]["body"]
    assert sent["model"] == "judge-1" and sent["temperature"] == 0.0
    prompt = sent["messages"][0]["content"]
    assert "user: What is 2+3?" in prompt and "Reference answer (may be empty):\n5" in prompt
    assert metrics["judge/failed_rate"] == pytest.approx(2 / 5)
    assert metrics["judge/requests"] == 5.0


def test_rate_limits_are_retried_and_other_http_errors_are_not():
    samples, _, metrics = asyncio.run(judged(["flaky", "forbidden"]))
    assert samples[0].rewards["judge"] == 0.5 and samples[0].status is SampleStatus.COMPLETED
    assert samples[1].status is SampleStatus.FAILED
    assert "answered HTTP 401" in samples[1].metadata["failure"]
    assert metrics["judge/requests"] == 3 + 1  # two 503s and the answer; one 401


def test_retries_run_out_into_a_failed_sample_naming_the_last_error():
    samples, _, _ = asyncio.run(judged(["flaky"], retries=1))
    assert samples[0].status is SampleStatus.FAILED
    assert "after 2 attempt(s): HTTP 503" in samples[0].metadata["failure"]


def test_a_judge_that_hangs_times_out():
    samples, _, _ = asyncio.run(judged(["slow", "5"], timeout=0.3, retries=0))
    assert "timed out after 0.3 s" in samples[0].metadata["failure"]
    assert samples[1].rewards["judge"] == 1.0


def test_judgements_are_cached_by_prompt_and_response_and_the_key_is_sent(monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "s3cret")

    async def twice() -> tuple[list[Sample], ScriptedJudge, dict[str, float]]:
        async with scripted_server() as (url, judge):
            rewards = RewardSet({"judge": reward(base_url=url, api_key_env="JUDGE_KEY")},
                                {"judge": 1.0})
            first, second = [sample("5"), sample("6")], [sample("5"), sample("none")]
            await rewards.score_group(first, TASK)
            await rewards.score_group(second, TASK)
            metrics = rewards.metrics()
            await rewards.close()
        return first + second, judge, metrics

    samples, judge, metrics = asyncio.run(twice())
    assert [s.rewards.get("judge") for s in samples] == [1.0, 0.0, 1.0, 0.0]
    assert len(judge.requests) == 3  # the second "5" came from the cache
    assert {r["auth"] for r in judge.requests} == {"Bearer s3cret"}
    assert metrics["judge/cache_hit_rate"] == pytest.approx(1 / 4)


def test_a_custom_template_and_its_mistakes(tmp_path):
    good = tmp_path / "judge.txt"
    good.write_text("Q: {prompt}\nA: {response}\nexpected {reference}; SCORE it")
    rendered = JudgeTemplate.load(str(good)).render(TASK, "6")
    assert rendered == "Q: user: What is 2+3?\nA: 6\nexpected 5; SCORE it"
    for text, message in (("{prompt} {answer} {response}", "unknown field(s) ['answer']"),
                          ("grade {prompt}", "never shows the {response}"),
                          ("{response", "write a literal brace")):
        good.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(message)):
            JudgeTemplate.load(str(good))
    with pytest.raises(ConfigError, match="no such file"):
        JudgeTemplate.load(str(tmp_path / "missing.txt"))


def test_missing_endpoint_model_or_key_is_refused_when_the_reward_set_is_built(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ConfigError, match="needs --judge-base-url and --judge-model"):
        RewardSet({"judge": reward(model=None)}, {})
    with pytest.raises(ConfigError, match="NO_SUCH_KEY_VAR: that environment variable"):
        RewardSet({"judge": reward(base_url="http://x/v1", api_key_env="NO_SUCH_KEY_VAR")}, {})


@pytest.mark.parametrize("reply, score", [
    ("SCORE: 0.4", 0.4), ("SCORE: 1\nSCORE: 0.2", 0.2), ("**Score:** 0.9", 0.9),
    ("score: 1e-1", 0.1), ("SCORE: 0.3\nthanks", 0.3), ("SCORE: -0.1", None),
    ("SCORE: nan", None), ("the score is 0.5", None), ("", None),
])
def test_parse_score(reply, score):
    assert parse_score(reply) == score


def test_the_embedded_engine_speaks_openai_chat(embedded_engine, http, tiny_model_dir):
    from transformers import AutoTokenizer

    url = embedded_engine.url
    messages = [{"role": "user", "content": "2+3"}]
    status, chat = http(url, "/v1/chat/completions",
                        {"model": "tiny", "messages": messages, "max_tokens": 6,
                         "temperature": 0})
    assert status == 200, chat
    assert chat["object"] == "chat.completion" and chat["model"] == "tiny"
    choice = chat["choices"][0]
    # the same greedy continuation /generate gives for the chat-templated prompt
    ids = AutoTokenizer.from_pretrained(tiny_model_dir).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    status, plain = http(url, "/generate", {"input_ids": ids, "sampling_params": {
        "max_new_tokens": 6, "temperature": 0}})
    assert choice["message"] == {"role": "assistant", "content": plain["text"]}
    assert chat["usage"]["prompt_tokens"] == len(ids)
    assert chat["usage"]["completion_tokens"] == len(plain["output_ids"])
    for body, field in (({"messages": messages, "stream": True}, "stream"),
                        ({"messages": []}, "messages"),
                        ({"messages": messages, "functions": []}, "functions")):
        status, error = http(url, "/v1/chat/completions", body)
        assert status == 400 and field in error["error"]["message"]
    status, models = http(url, "/v1/models")
    assert status == 200 and models["data"][0]["object"] == "model"


def test_a_tiny_model_as_judge_fails_its_samples_cleanly(embedded_engine):
    """A random model never writes a SCORE line: every sample fails with its reply kept."""
    judge = reward(base_url=embedded_engine.url + "/v1", model="tiny", max_tokens=8)
    rewards = RewardSet({"judge": judge}, {"judge": 1.0})
    samples = [sample("5"), sample("6")]

    async def score() -> None:
        await rewards.score_group(samples, TASK)
        await rewards.close()

    asyncio.run(score())
    for failed in samples:
        assert failed.status is SampleStatus.FAILED and failed.reward == 0.0
        assert "has no last line 'SCORE" in failed.metadata["failure"]
        assert isinstance(failed.metadata["judge"]["reply"], str)  # kept for samples.jsonl
