"""Trace → Sample conversion on hand-built traces (multi-turn masks, branches, statuses)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from rollyard import SampleStatus
from rollyard_verifiers.bridge import SessionRecord
from rollyard_verifiers.samples import EnvironmentMetrics, trace_samples


def branch(index: int, tokens: list[int], mask: list[bool], logprobs: list[float],
           trainable: bool = True) -> SimpleNamespace:
    return SimpleNamespace(index=index, token_ids=tokens, sampled_mask=mask,
                           logprobs=logprobs, trainable=trainable)


def trace(branches: list[SimpleNamespace], **fields) -> SimpleNamespace:
    """The parts of a ``verifiers.v1.Trace`` the conversion reads."""
    base = dict(id="t1", ok=True, errors=[], is_truncated=False, reward=1.2, num_turns=2,
                rewards={"correct": SimpleNamespace(score=1.0), "brief": SimpleNamespace(
                    score=1.0), "skipped": None},
                branches=branches, last_reply="4", stop_condition="agent_completed")
    return SimpleNamespace(**{**base, **fields})


# prompt 3 tokens, model turn (2), environment turn (2), model turn (2)
MULTI_TURN = branch(0, [1, 2, 3, 10, 11, 20, 21, 12, 13],
                    [False] * 3 + [True] * 2 + [False] * 2 + [True] * 2,
                    [0.0] * 3 + [-0.5, -0.6] + [0.0, 0.0] + [-0.7, -0.8])


def test_environment_tokens_are_masked_out_of_a_multi_turn_sample() -> None:
    [sample] = trace_samples(trace([MULTI_TURN]), SessionRecord(weight_versions=[3, 2]),
                             "task-1", "g")
    sample.validate()
    assert sample.prompt_len == 3
    assert sample.response_ids == [10, 11, 20, 21, 12, 13]
    assert sample.loss_mask == [1, 1, 0, 0, 1, 1]
    assert sample.logprobs == [-0.5, -0.6, 0.0, 0.0, -0.7, -0.8]
    assert sample.reward == 1.2
    assert sample.rewards == {"correct": 1.0, "brief": 1.0}
    assert sample.status == SampleStatus.COMPLETED
    assert sample.weight_version == 2  # the oldest weights that served the trace
    assert (sample.task_id, sample.group_id) == ("task-1", "g")
    assert sample.metadata["completion"] == "4"


def test_each_trainable_branch_becomes_its_own_sample() -> None:
    other = branch(1, [1, 2, 3, 30], [False, False, False, True], [0.0, 0.0, 0.0, -0.1])
    frozen = branch(2, [1, 2, 3, 40], [False, False, False, True], [0.0, 0.0, 0.0, -0.2],
                    trainable=False)
    samples = trace_samples(trace([MULTI_TURN, other, frozen]), SessionRecord(), "t", "g")
    assert [s.metadata["branch"] for s in samples] == [0, 1]
    assert samples[1].response_ids == [30]


@pytest.mark.parametrize(("fields", "session", "status", "reason"), [
    ({}, SessionRecord(failed="engine down"), SampleStatus.FAILED, "engine down"),
    ({}, SessionRecord(aborted="weights updating"), SampleStatus.ABORTED, "weights updating"),
    ({"ok": False, "errors": [SimpleNamespace(type="HarnessError", message="exit 1")]},
     SessionRecord(), SampleStatus.FAILED, "HarnessError: exit 1"),
    ({"is_truncated": True}, SessionRecord(), SampleStatus.TRUNCATED, None),
])
def test_status_precedence_and_reasons(fields, session, status, reason) -> None:
    [sample] = trace_samples(trace([MULTI_TURN], **fields), session, "t", "g")
    sample.validate()
    assert sample.status == status
    assert sample.metadata.get("failure") == reason
    if not sample.usable:
        assert (sample.reward, sample.rewards) == (0.0, {})


def test_a_trace_without_branches_is_one_failed_sample() -> None:
    failed = trace([], ok=False, errors=[SimpleNamespace(type="EnvError", message="setup")])
    [sample] = trace_samples(failed, SessionRecord(), "t", "g")
    sample.validate()
    assert sample.status == SampleStatus.FAILED
    assert sample.tokens == [] and "EnvError: setup" in sample.metadata["failure"]


def test_metrics_are_means_over_traces() -> None:
    metrics = EnvironmentMetrics()
    for fields in ({}, {"is_truncated": True, "reward": 0.2}, {"ok": False, "num_turns": 1}):
        t = trace([MULTI_TURN], **fields)
        metrics.add(t.num_turns, trace_samples(t, SessionRecord(), "t", "g"))
    assert metrics.summary() == pytest.approx({
        "verifiers/reward_mean": 0.7, "verifiers/error_rate": 1 / 3,
        "verifiers/truncated_rate": 1 / 3, "verifiers/num_turns_mean": 5 / 3})
    assert EnvironmentMetrics().summary() == {}
