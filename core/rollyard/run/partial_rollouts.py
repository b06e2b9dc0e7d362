"""``--partial-rollouts``: generations a weight update aborted go on from where they stopped.

With it, a weight push first asks the engines to abort their requests, then updates them, so
the update is applied at once instead of after the running requests finished on the old
weights. Each aborted request comes back as :class:`rollyard.EngineAborted` carrying what it
had generated; :class:`ResumingTransport`, which the rollout workers hand to the rollout
plugin in place of the run's transport, waits until that engine serves newer weights, sends
the prompt and those tokens again for the tokens still to come, and returns the pieces as one
result. Rollout plugins see whole generations, as without it.

A resumed result's tokens were sampled by more than one weight version: its
``weight_version`` is the oldest (the first piece's), so the staleness bound of ``--async``
holds for every token; each token's logprob is the one of the weights that sampled it, which
is what truncated importance sampling (``--tis-cap``) corrects against.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from rollyard.errors import EngineAborted, TransportError
from rollyard.interfaces import Transport
from rollyard.types import GenerateRequest, GenerateResult

#: Most times one generation is resumed; an engine that keeps aborting it (an error, a
#: shutdown) gives the EngineAborted back to the rollout after that.
MAX_RESUMES = 8
#: Longest wait, in seconds, for the engine that aborted a generation to serve newer weights
#: before it is resumed anyway (an abort no update caused).
RESUME_WAIT_S = 10.0
#: Seconds between two looks at that engine's weight version.
VERSION_POLL_S = 0.01


class ResumingTransport(Transport):
    """The run's transport as a rollout uses it (generate, health, versions), resuming
    generations an engine aborted with partial output; anything else is the inner one's."""

    def __init__(self, inner: Transport) -> None:  # the inner transport has the options
        self.inner, self.name = inner, inner.name
        self.urls, self.options = inner.urls, inner.options
        #: Generations asked for, and how many of them were resumed, since the last
        #: :meth:`take_counts`.
        self.generations = 0
        self.resumed = 0
        #: One look-out per (engine, weight version) that aborted generations wait past.
        self._newer: dict[tuple[str, int], asyncio.Future] = {}

    def __getattr__(self, name: str) -> Any:  # everything else is the inner transport's
        return getattr(self.inner, name)

    def take_counts(self) -> tuple[int, int]:
        """(generations, resumed generations) since the last call."""
        counts = (self.generations, self.resumed)
        self.generations = self.resumed = 0
        return counts

    async def generate(self, request: GenerateRequest) -> GenerateResult:
        self.generations += 1
        try:
            return await self.inner.generate(request)
        except EngineAborted as exc:
            return await self._resume(request, exc)

    async def generate_batch(self, requests: Sequence[GenerateRequest], *,
                             return_exceptions: bool = False,
                             ) -> list[GenerateResult | TransportError]:
        self.generations += len(requests)
        results = await self.inner.generate_batch(requests, return_exceptions=True)

        async def settle(request: GenerateRequest,
                         result: GenerateResult | TransportError,
                         ) -> GenerateResult | TransportError:
            if isinstance(result, EngineAborted):
                try:
                    return await self._resume(request, result)
                except TransportError as exc:
                    return exc
            return result

        settled = await asyncio.gather(*(settle(r, x) for r, x in zip(requests, results)))
        if not return_exceptions:
            for result in settled:
                if isinstance(result, TransportError):
                    raise result
        return list(settled)

    async def _resume(self, request: GenerateRequest, aborted: EngineAborted) -> GenerateResult:
        """Go on with ``request`` from the partial output of ``aborted`` until it finishes;
        re-raises the abort when there is nothing to resume from or it keeps aborting."""
        pieces: list[GenerateResult] = []
        for _ in range(MAX_RESUMES):
            if aborted.partial is None:
                raise aborted
            pieces.append(aborted.partial)
            done = sum(len(p.output_ids) for p in pieces)
            left = request.sampling.max_new_tokens - done
            if left <= 0:
                return _joined(pieces, "length")
            if len(pieces) == 1:
                self.resumed += 1
            sampling = request.sampling
            seed = None if sampling.seed is None else sampling.seed + done
            generated = [t for p in pieces for t in p.output_ids]
            await self._newer_weights(aborted.url, aborted.partial.weight_version)
            continuation = replace(
                request, input_ids=[*request.input_ids, *generated],
                sampling=replace(sampling, max_new_tokens=left, seed=seed,
                                 min_new_tokens=max(0, sampling.min_new_tokens - done)))
            try:
                last = await self.inner.generate(continuation)
            except EngineAborted as exc:
                aborted = exc
                continue
            return _joined([*pieces, last], last.finish_reason)
        raise aborted

    async def _newer_weights(self, url: str | None, version: int) -> None:
        """Wait (at most :data:`RESUME_WAIT_S`) until engine ``url`` serves weights newer than
        ``version``. A push aborts first and updates after: a generation resent in between
        would be one the update waits for, on the old weights."""
        if url is None:
            return
        key = (url, version)
        if key not in self._newer:
            self._newer[key] = asyncio.ensure_future(self._watch(url, version))
        await asyncio.shield(self._newer[key])

    async def _watch(self, url: str, version: int) -> None:
        deadline = asyncio.get_running_loop().time() + RESUME_WAIT_S
        try:
            while asyncio.get_running_loop().time() < deadline:
                try:
                    served = (await self.inner.weight_versions()).get(url)
                except TransportError:
                    return
                if served is None or served > version:
                    return
                await asyncio.sleep(VERSION_POLL_S)
        finally:
            self._newer.pop((url, version), None)

    async def health(self) -> dict[str, bool]:
        return await self.inner.health()

    async def weight_versions(self) -> dict[str, int]:
        return await self.inner.weight_versions()

    async def update_weights(self, model_dir: str, weight_version: int, **kwargs: Any) -> None:
        await self.inner.update_weights(model_dir, weight_version, **kwargs)

    async def close(self) -> None:
        await self.inner.close()


def _joined(pieces: list[GenerateResult], finish_reason: Any) -> GenerateResult:
    """The pieces of one generation as one result, with the oldest weight version that
    sampled a token of it (a request aborted before it started sampled none)."""
    sampled = [p.weight_version for p in pieces if p.output_ids] or [pieces[-1].weight_version]
    return GenerateResult(output_ids=[t for p in pieces for t in p.output_ids],
                          logprobs=[lp for p in pieces for lp in p.logprobs],
                          finish_reason=finish_reason, weight_version=min(sampled))
