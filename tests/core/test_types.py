"""Sample validation: the invariants the core checks on every sample a plugin returns."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rollyard import SampleError, SampleStatus
from rollyard.types import Sample

STATUS_VALUES = [s.value for s in SampleStatus]
token_ids = st.integers(min_value=0, max_value=200_000)
logprob_values = st.floats(min_value=-80.0, max_value=0.0, allow_nan=False)
#: Validation is fast, but a loaded CI machine must not turn into a DeadlineExceeded failure.
no_deadline = settings(deadline=None)
task_ids = st.text(min_size=1, max_size=12, alphabet="abcxyz-0123456789")


@st.composite
def valid_samples(draw: st.DrawFn, min_response: int = 0) -> Sample:
    prompt = draw(st.lists(token_ids, max_size=12))
    response = draw(st.lists(token_ids, min_size=min_response, max_size=12))
    n = len(response)
    return Sample(
        tokens=prompt + response, prompt_len=len(prompt),
        loss_mask=draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n)),
        logprobs=draw(st.lists(logprob_values, min_size=n, max_size=n)),
        reward=draw(st.floats(min_value=-1e6, max_value=1e6)),
        rewards=draw(st.dictionaries(st.sampled_from(["a", "b/c"]),
                                     st.floats(min_value=-10, max_value=10))),
        status=draw(st.sampled_from(list(SampleStatus) + STATUS_VALUES)),
        task_id=draw(task_ids))


def assert_rejected(sample: Sample, field: str) -> None:
    with pytest.raises(SampleError) as info:
        sample.validate()
    assert info.value.task_id == sample.task_id
    assert info.value.field == field
    assert repr(sample.task_id) in str(info.value)
    assert repr(field) in str(info.value)


@no_deadline
@given(valid_samples())
def test_valid_samples_pass(sample: Sample) -> None:
    sample.validate()
    assert isinstance(sample.status, SampleStatus)
    assert sample.response_len == len(sample.loss_mask) == len(sample.logprobs)


@no_deadline
@given(valid_samples(), st.sampled_from(["loss_mask", "logprobs"]),
       st.integers(min_value=-3, max_value=3).filter(bool))
def test_mismatched_length_is_rejected(sample: Sample, field: str, delta: int) -> None:
    values = getattr(sample, field)
    if delta > 0:
        values.extend([0] * delta)
    elif len(values) >= -delta:
        del values[delta:]
    else:
        values.append(0)
    assert_rejected(sample, field)


@no_deadline
@given(valid_samples(min_response=1), st.data(),
       st.sampled_from([math.nan, math.inf, -math.inf, 0.5, 3.0, 1e9]))
def test_nan_or_positive_logprob_is_rejected(sample: Sample, data: st.DataObject,
                                             bad: float) -> None:
    index = data.draw(st.integers(min_value=0, max_value=len(sample.logprobs) - 1))
    sample.logprobs[index] = bad
    assert_rejected(sample, "logprobs")
    with pytest.raises(SampleError, match=f"entry {index} "):
        sample.validate()


@no_deadline
@given(valid_samples(), st.text(max_size=10).filter(lambda s: s not in STATUS_VALUES))
def test_unknown_status_is_rejected(sample: Sample, status: str) -> None:
    sample.status = status  # type: ignore[assignment]
    assert_rejected(sample, "status")


@no_deadline
@given(valid_samples(), st.sampled_from([math.nan, math.inf]))
def test_non_finite_reward_is_rejected(sample: Sample, bad: float) -> None:
    sample.reward = bad
    assert_rejected(sample, "reward")


@no_deadline
@given(valid_samples(), st.sampled_from([math.nan, -math.inf]))
def test_non_finite_reward_component_is_rejected(sample: Sample, bad: float) -> None:
    sample.rewards["correct"] = bad
    assert_rejected(sample, "rewards['correct']")


@pytest.mark.parametrize("tokens, field", [
    ([1, -2, 3], "tokens"), ([1, 2.0, 3], "tokens"), ([1, True, 3], "tokens"),
])
def test_bad_token_ids_are_rejected(tokens: list, field: str) -> None:
    assert_rejected(Sample(tokens=tokens, prompt_len=1, loss_mask=[1, 1], logprobs=[0.0, 0.0],
                           task_id="t1"), field)


@pytest.mark.parametrize("prompt_len", [-1, 4, 1.5])
def test_prompt_len_outside_tokens_is_rejected(prompt_len: object) -> None:
    assert_rejected(Sample(tokens=[1, 2, 3], prompt_len=prompt_len, loss_mask=[], logprobs=[],
                           task_id="t2"), "prompt_len")


def test_loss_mask_entries_must_be_zero_or_one() -> None:
    assert_rejected(Sample(tokens=[1, 2, 3], prompt_len=1, loss_mask=[1, 2],
                           logprobs=[-0.1, -0.2], task_id="t3"), "loss_mask")


def test_status_string_becomes_the_enum() -> None:
    sample = Sample(tokens=[5, 6], prompt_len=1, loss_mask=[1], logprobs=[-1.0],
                    status="truncated", task_id="t4")  # type: ignore[arg-type]
    sample.validate()
    assert sample.status is SampleStatus.TRUNCATED


def test_response_views_and_usability() -> None:
    sample = Sample(tokens=[7, 8, 9, 10], prompt_len=3, loss_mask=[1], logprobs=[-0.5])
    assert sample.response_ids == [10] and sample.response_len == 1
    usable = {s: Sample([1], 1, [], [], status=s).usable for s in SampleStatus}
    assert usable == {SampleStatus.COMPLETED: True, SampleStatus.TRUNCATED: True,
                      SampleStatus.ABORTED: False, SampleStatus.FAILED: False}
