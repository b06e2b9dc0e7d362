"""Collect one step of samples from a rollout plugin: bounded concurrency, timeouts, and
validation at the boundary. A group that raises, times out or returns malformed samples
becomes failed/aborted samples with the reason, and so does a sample longer than the model
can train on; the step goes on."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from rollyard.errors import SampleError
from rollyard.interfaces import Rollout
from rollyard.model_facts import fail_if_too_long
from rollyard.rewards import RewardSet
from rollyard.seeding import seeded_group
from rollyard.types import Sample, SampleStatus, Task


@dataclass
class CollectSettings:
    group_size: int
    max_concurrent_groups: int
    group_timeout_s: float
    #: Longest prompt + response the model takes (its ``max_position_embeddings``); a longer
    #: sample fails. None: not checked here (the trainer still fails such samples).
    max_tokens: int | None = None


def placeholder(task: Task, status: SampleStatus, reason: str, group_id: str = "") -> Sample:
    """A sample that stands for an episode that produced nothing usable."""
    return Sample.lost(task.id, group_id or f"{task.id}/lost", status, reason)


def checked(samples: object, task: Task, plugin: str,
            max_tokens: int | None = None) -> list[Sample]:
    """Validate what ``run_group`` returned; malformed entries become failed placeholders and
    samples longer than ``max_tokens`` fail."""
    if not isinstance(samples, list) or not samples:
        return [placeholder(task, SampleStatus.FAILED,
                            f"rollout {plugin!r} returned {type(samples).__name__} "
                            f"{samples!r:.80}, expected a non-empty list of Sample")]
    result = []
    for item in samples:
        if not isinstance(item, Sample):
            result.append(placeholder(task, SampleStatus.FAILED,
                                      f"rollout {plugin!r} returned {type(item).__name__}, "
                                      "not a Sample"))
            continue
        if not item.task_id:
            item.task_id = task.id
        try:
            item.validate()
            item.sync_marks()  # what a plugin wrote under the marks' old metadata keys
        except SampleError as exc:
            result.append(placeholder(task, SampleStatus.FAILED, f"rollout {plugin!r}: {exc}",
                                      item.group_id))
            continue
        fail_if_too_long(item, max_tokens)
        result.append(item)
    return result


async def run_one_group(rollout: Rollout, rewards: RewardSet, task: Task,
                        settings: CollectSettings, seed: int | None = None) -> list[Sample]:
    """One group of ``task``, its sampling seeded with ``seed`` (see rollyard.seeding)."""
    plugin = rollout.name
    try:
        with seeded_group(seed):
            samples = await asyncio.wait_for(rollout.run_group(task, settings.group_size),
                                             settings.group_timeout_s)
    except TimeoutError:
        return [placeholder(task, SampleStatus.ABORTED,
                            f"rollout {plugin!r} timed out after {settings.group_timeout_s}s")
                for _ in range(settings.group_size)]
    except Exception as exc:  # a plugin bug fails its samples, not the run
        return [placeholder(task, SampleStatus.FAILED,
                            f"rollout {plugin!r} raised {type(exc).__name__}: {exc}")
                for _ in range(settings.group_size)]
    samples = checked(samples, task, plugin, settings.max_tokens)
    if rewards:
        await rewards.score_group(samples, task)
        samples = checked(samples, task, plugin)  # rewards must leave samples valid, too
    return samples


async def collect_step(rollout: Rollout, rewards: RewardSet, tasks: list[Task],
                       settings: CollectSettings,
                       seeds: list[int | None] | None = None) -> list[Sample]:
    """Run one group per task, at most ``max_concurrent_groups`` at a time; ``seeds`` holds
    each group's sampling seed (None: unseeded)."""
    gate = asyncio.Semaphore(settings.max_concurrent_groups)

    async def gated(task: Task, seed: int | None) -> list[Sample]:
        async with gate:
            return await run_one_group(rollout, rewards, task, settings, seed)

    seeds = list(seeds) if seeds is not None else [None] * len(tasks)
    groups = await asyncio.gather(*(gated(task, seed) for task, seed in zip(tasks, seeds)))
    return [sample for group in groups for sample in group]


#: The ``Sample.metadata`` keys :func:`with_text` fills: what samples.jsonl shows as text.
PROMPT_TEXT, RESPONSE_TEXT = "prompt_text", "response_text"


def with_text(samples: list[Sample], tokenizer: Any) -> list[Sample]:
    """Decode each sample's prompt and response (special tokens kept, so the chat template
    shows) into ``metadata["prompt_text"]`` and ``metadata["response_text"]``, for the
    loggers; a value the rollout set itself is kept. Returns ``samples``."""
    for sample in samples:
        tokens = sample.tokens
        sample.metadata.setdefault(PROMPT_TEXT, tokenizer.decode(tokens[:sample.prompt_len]))
        sample.metadata.setdefault(RESPONSE_TEXT, tokenizer.decode(tokens[sample.prompt_len:]))
    return samples
