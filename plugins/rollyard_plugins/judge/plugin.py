"""The ``judge`` reward: an LLM behind any OpenAI-compatible chat endpoint grades each sample.

``--reward judge`` with ``--judge-base-url URL --judge-model NAME``. The judge sees the
template (by default: the task's prompt, its reference answer ``task.data["answer"]`` when it
has one, and the reply) and must end its reply with ``SCORE: <0..1>``; the last such line is
the score, recorded as ``reward/judge``. A reply without one, or no reply at all after the
retries, fails that sample (``samples/failed_rate``) with the judge's reply kept in
``metadata["judge"]`` of samples.jsonl; the group's other samples are scored.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass

from rollyard import RewardContext, Sample, Task, hookimpl
from rollyard.errors import ConfigError
from rollyard.evaluators import EvaluatedReward, Evaluator, Score

from rollyard_plugins.judge.client import JudgeClient, JudgeUnavailable
from rollyard_plugins.judge.options import PREFIX, JudgeOptions
from rollyard_plugins.judge.template import JudgeTemplate, parse_score

#: Where a sample's judgement is recorded for the sample tables.
METADATA_KEY = "judge"


@dataclass(frozen=True)
class Judgement:
    """The judge's reply to one sample and the score read from it (None: no valid score)."""

    reply: str
    score: float | None


class JudgeEvaluator(Evaluator[Judgement]):
    """Asks the judge about every sample of a group (concurrently, up to
    ``--judge-concurrency``), remembering recent judgements by (model, rendered prompt).

    Metrics since the last call: ``judge/requests`` (HTTP requests, retries included),
    ``judge/cache_hit_rate`` and ``judge/failed_rate`` (samples without a valid score).
    """

    def __init__(self, context: RewardContext) -> None:
        super().__init__(context)
        options: JudgeOptions = context.options
        missing = [flag for flag, value in (("--judge-base-url", options.base_url),
                                            ("--judge-model", options.model)) if not value]
        if missing:
            raise ConfigError(f"the judge reward needs {' and '.join(missing)}")
        api_key = None
        if options.api_key_env:
            api_key = os.environ.get(options.api_key_env)
            if not api_key:
                raise ConfigError(f"--judge-api-key-env {options.api_key_env}: that environment "
                                  f"variable is not set")
        self.options = options
        self.template = JudgeTemplate.load(options.template)
        self.client = JudgeClient(options, api_key)
        self._cache: OrderedDict[str, Judgement] = OrderedDict()
        self._asked = self._hits = self._failed = 0

    async def evaluate(self, samples: list[Sample], task: Task) -> list[Judgement]:
        return list(await asyncio.gather(*(self._one(s, task) for s in samples)))

    async def _one(self, sample: Sample, task: Task) -> Judgement:
        content = self.template.render(task, sample.completion or "")
        key = hashlib.sha256(f"{self.options.model}\0{content}".encode()).hexdigest()
        self._asked += 1
        judgement = self._cache.get(key)
        if judgement is not None:
            self._hits += 1
            self._cache.move_to_end(key)
        else:
            try:
                reply = await self.client.reply(content)
            except JudgeUnavailable as exc:
                judgement = Judgement(reply="", score=None)
                self._fail(sample, str(exc), judgement)
                return judgement
            judgement = Judgement(reply=reply, score=parse_score(reply))
            if judgement.score is not None:
                self._remember(key, judgement)
        if judgement.score is None:
            self._fail(sample, "the judge's reply has no last line 'SCORE: <number between 0 "
                               "and 1>'", judgement)
        else:
            sample.metadata[METADATA_KEY] = {"reply": judgement.reply, "score": judgement.score}
        return judgement

    def _remember(self, key: str, judgement: Judgement) -> None:
        if self.options.cache_size == 0:
            return
        self._cache[key] = judgement
        if len(self._cache) > self.options.cache_size:
            self._cache.popitem(last=False)

    def _fail(self, sample: Sample, reason: str, judgement: Judgement) -> None:
        self._failed += 1
        sample.fail(f"judge: {reason}")
        sample.metadata[METADATA_KEY] = {"reply": judgement.reply, "score": None}

    def metrics(self) -> dict[str, float]:
        if not self._asked:
            return {}
        metrics = {"judge/requests": float(self.client.sent),
                   "judge/cache_hit_rate": self._hits / self._asked,
                   "judge/failed_rate": self._failed / self._asked}
        self.client.sent = self._asked = self._hits = self._failed = 0
        return metrics

    async def close(self) -> None:
        await self.client.close()


class JudgeReward(EvaluatedReward[Judgement]):
    """The judge's score in [0, 1] (0 for a sample it could not score, which is failed)."""

    name = "judge"
    Options = JudgeOptions
    options_prefix = PREFIX
    evaluator = JudgeEvaluator

    async def score_evaluated(self, samples: list[Sample], task: Task,
                              results: list[Judgement]) -> list[Score]:
        return [0.0 if r.score is None else r.score for r in results]


@hookimpl
def register_rewards(register: object) -> None:
    register(JudgeReward)  # type: ignore[operator]

