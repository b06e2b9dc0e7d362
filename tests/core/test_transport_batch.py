"""``Transport.generate_batch``'s default: a transport that implements only ``generate`` (a
third-party one written before batches) still answers a group, request by request."""

from __future__ import annotations

import asyncio

import pytest
from rollyard import EngineAborted, GenerateRequest, SamplingParams
from rollyard.testing import ScriptedTransport


def _requests(n: int) -> list[GenerateRequest]:
    return [GenerateRequest([1, 2, 3], SamplingParams(max_new_tokens=4, seed=i))
            for i in range(n)]


def test_the_default_batch_answers_in_order_through_generate() -> None:
    transport = ScriptedTransport([[7], [8], [9]])
    results = asyncio.run(transport.generate_batch(_requests(3)))
    assert [r.output_ids for r in results] == [[7], [8], [9]]
    assert [r.sampling.seed for r in transport.requests] == [0, 1, 2]


def test_a_failed_request_gives_its_error_in_place_or_raises() -> None:
    replies = [[7], EngineAborted("engine restarted"), [9]]
    results = asyncio.run(ScriptedTransport(replies).generate_batch(_requests(3),
                                                                    return_exceptions=True))
    assert results[0].output_ids == [7] and results[2].output_ids == [9]
    assert isinstance(results[1], EngineAborted)
    with pytest.raises(EngineAborted, match="engine restarted"):
        asyncio.run(ScriptedTransport(replies).generate_batch(_requests(3)))


def test_a_bug_in_generate_is_raised_not_returned() -> None:
    with pytest.raises(ZeroDivisionError):
        asyncio.run(ScriptedTransport([[7], ZeroDivisionError()]).generate_batch(
            _requests(2), return_exceptions=True))


def test_distributed_weight_sync_is_refused_clearly_by_a_transport_without_it() -> None:
    transport = ScriptedTransport()
    assert transport.supports_distributed_weight_sync is False
    with pytest.raises(NotImplementedError, match="--weight-sync disk"):
        asyncio.run(transport.weight_group_ranks())
