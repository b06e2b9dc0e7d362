"""Building blocks for rollout plugins: render a prompt, sample a group, build Samples."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from rollyard.errors import EngineAborted, TransportError
from rollyard.interfaces import RolloutContext
from rollyard.seeding import group_seed, request_seed
from rollyard.types import (
    GenerateRequest,
    GenerateResult,
    Message,
    Sample,
    SampleStatus,
    SamplingParams,
    Task,
)


def render_prompt(tokenizer: Any, prompt: list[Message] | str) -> list[int]:
    """Token ids of a task prompt: chat messages through the tokenizer's chat template (with
    the assistant turn opened), plain text as is."""
    if isinstance(prompt, str):
        return list(tokenizer.encode(prompt, add_special_tokens=False))
    ids = tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # transformers 5 returns an encoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


def _sampling_for(context: RolloutContext, index: int) -> SamplingParams:
    sampling: SamplingParams = context.sampling or SamplingParams()
    stop = list(sampling.stop_token_ids)
    eos = getattr(context.tokenizer, "eos_token_id", None)
    if eos is not None and eos not in stop:
        stop.append(eos)
    # a seed the rollout set itself wins; else the run's per-group seed (rollyard.seeding)
    seed = request_seed(index) if sampling.seed is None else sampling.seed + index
    return replace(sampling, stop_token_ids=stop, seed=seed)


async def sample_single_turn(context: RolloutContext, task: Task, n: int) -> list[Sample]:
    """Run ``n`` single-turn episodes of ``task`` through the run's transport, as one batch
    (:meth:`rollyard.Transport.generate_batch`); each request keeps its own sampling seed.

    Each sample records the decoded completion in ``metadata["completion"]``. An engine abort
    makes that sample ``aborted``; a transport error makes it ``failed``; both keep the reason.
    """
    prompt_ids = render_prompt(context.tokenizer, task.prompt)
    seed = group_seed()  # names the group reproducibly when the run seeds it
    group_id = f"{task.id}/{uuid.uuid4().hex[:8] if seed is None else f'{seed:08x}'}"

    def one(result: GenerateResult | TransportError) -> Sample:
        if isinstance(result, TransportError):  # EngineAborted included
            status = (SampleStatus.ABORTED if isinstance(result, EngineAborted)
                      else SampleStatus.FAILED)
            lost = Sample.lost(task.id, group_id, status, str(result), prompt_ids)
            lost.metadata["completion"] = ""
            return lost
        status = (SampleStatus.TRUNCATED if result.finish_reason == "length"
                  else SampleStatus.COMPLETED)
        return Sample(
            tokens=prompt_ids + list(result.output_ids), prompt_len=len(prompt_ids),
            loss_mask=[1] * len(result.output_ids), logprobs=list(result.logprobs),
            status=status, task_id=task.id, group_id=group_id,
            weight_version=result.weight_version,
            metadata={"completion": context.tokenizer.decode(result.output_ids,
                                                             skip_special_tokens=True)})

    # the whole group in one call: an engine sees its shared prompt once
    requests = [GenerateRequest(prompt_ids, _sampling_for(context, index),
                                session_id=f"{group_id}/{index}") for index in range(n)]
    results = await context.transport.generate_batch(requests, return_exceptions=True)
    return [one(result) for result in results]

