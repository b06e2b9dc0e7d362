"""Single-turn episodes, and the conventions every episode shares: the group id, each
request's sampling (seed, stop ids) and its session id."""

from __future__ import annotations

import uuid
from dataclasses import replace

from rollyard.episodes.prompts import render_prompt
from rollyard.errors import EngineAborted, TransportError
from rollyard.interfaces import RolloutContext
from rollyard.seeding import derive_seed, group_seed, request_seed
from rollyard.types import (
    GenerateRequest,
    GenerateResult,
    Sample,
    SampleStatus,
    SamplingParams,
    Task,
)


def new_group_id(task: Task) -> str:
    """The id shared by the samples of one group: the task's id and the group seed (so a
    seeded run names its groups reproducibly), else a random suffix."""
    seed = group_seed()
    return f"{task.id}/{uuid.uuid4().hex[:8] if seed is None else f'{seed:08x}'}"


def session_id(group_id: str, index: int) -> str:
    """The session of episode ``index`` of a group: every request of the episode carries it,
    so sticky routing keeps the episode on one engine (and its KV cache)."""
    return f"{group_id}/{index}"


def episode_sampling(context: RolloutContext, index: int, turn: int = 0) -> SamplingParams:
    """The sampling of turn ``turn`` of episode ``index``: the run's, with the tokenizer's EOS
    among the stop ids and the request's seed (a seed the rollout set itself wins; else the
    run's per-group seed, :mod:`rollyard.seeding`)."""
    sampling: SamplingParams = context.sampling or SamplingParams()
    stop = list(sampling.stop_token_ids)
    eos = getattr(context.tokenizer, "eos_token_id", None)
    if eos is not None and eos not in stop:
        stop.append(eos)
    if sampling.seed is None:
        seed = request_seed(index, turn)
    else:
        seed = sampling.seed + index if turn == 0 else derive_seed(sampling.seed, index, turn)
    return replace(sampling, stop_token_ids=stop, seed=seed)


def lost_sample(task: Task, group_id: str, error: BaseException, prompt_ids: list[int],
                where: str = "") -> Sample:
    """The sample of an episode lost to ``error``: ``aborted`` for an engine abort, else
    ``failed``; ``where`` (``turn 2: ``) prefixes the reason."""
    status = SampleStatus.ABORTED if isinstance(error, EngineAborted) else SampleStatus.FAILED
    return Sample.lost(task.id, group_id, status, f"{where}{error}", prompt_ids, completion="")


async def sample_single_turn(context: RolloutContext, task: Task, n: int) -> list[Sample]:
    """Run ``n`` single-turn episodes of ``task`` through the run's transport, as one batch
    (:meth:`rollyard.Transport.generate_batch`); each request keeps its own sampling seed.

    Each sample records the decoded completion in ``completion``. An engine abort
    makes that sample ``aborted``; a transport error makes it ``failed``; both keep the reason.
    """
    prompt_ids = render_prompt(context.tokenizer, task.prompt)
    group_id = new_group_id(task)

    def one(result: GenerateResult | TransportError) -> Sample:
        if isinstance(result, TransportError):  # EngineAborted included
            return lost_sample(task, group_id, result, prompt_ids)
        status = (SampleStatus.TRUNCATED if result.finish_reason == "length"
                  else SampleStatus.COMPLETED)
        return Sample(
            tokens=prompt_ids + list(result.output_ids), prompt_len=len(prompt_ids),
            loss_mask=[1] * len(result.output_ids), logprobs=list(result.logprobs),
            status=status, task_id=task.id, group_id=group_id,
            weight_version=result.weight_version,
            completion=context.tokenizer.decode(result.output_ids, skip_special_tokens=True))

    # the whole group in one call: an engine sees its shared prompt once
    requests = [GenerateRequest(prompt_ids, episode_sampling(context, index),
                                session_id=session_id(group_id, index)) for index in range(n)]
    results = await context.transport.generate_batch(requests, return_exceptions=True)
    return [one(result) for result in results]
