"""Sample validation: the invariants the core checks on every sample a plugin returns; its
typed marks, across the wire and pickle."""

from __future__ import annotations

import copy
import json
import math
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rollyard import SampleError, SampleStatus
from rollyard.env_server.wire import sample_from_data, sample_to_data
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


def marked() -> Sample:
    return Sample(tokens=[1, 2, 3], prompt_len=1, loss_mask=[1, 1], logprobs=[-0.1, -0.2],
                  status=SampleStatus.ABORTED, task_id="t", group_id="g", weight_version=2,
                  metadata={"env": "e"}, failure="engine aborted", completion="hi",
                  replayed_from_version=1)


def marks(sample: Sample) -> tuple:
    return (sample.status, sample.failure, sample.completion, sample.replayed_from_version)


def test_the_marks_are_fields_copied_under_their_metadata_keys_for_old_plugins():
    sample = marked()
    assert marks(sample) == (SampleStatus.ABORTED, "engine aborted", "hi", 1)
    assert sample.metadata == {"env": "e", "failure": "engine aborted", "completion": "hi",
                               "replayed_from_version": 1}
    old = Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[-0.1],
                 metadata={"failure": "made by an old plugin", "completion": "x"})
    assert marks(old) == (SampleStatus.FAILED, "made by an old plugin", "x", None)
    for no_reason in ("", None, False):  # an old plugin's "no failure"
        kept = Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[-0.1],
                      metadata={"failure": no_reason})
        assert kept.usable and kept.failure is None
    sample.fail("rescored badly")
    assert (sample.status, sample.reward, sample.metadata["failure"]) == (
        SampleStatus.FAILED, 0.0, "rescored badly")
    lost = Sample.lost("t", "g", SampleStatus.ABORTED, "engine gone", [1, 2], completion="")
    assert marks(lost) == (SampleStatus.ABORTED, "engine gone", "", None)
    assert lost.metadata == {"failure": "engine gone", "completion": ""}


@pytest.mark.parametrize(("name", "value"), [("failure", 3), ("completion", ["hi"]),
                                             ("replayed_from_version", "1"),
                                             ("metadata", None)])
def test_a_mark_of_the_wrong_type_is_named(name, value):
    sample = marked()
    setattr(sample, name, value)
    with pytest.raises(SampleError, match=f"field '{name}'"):
        sample.validate()


def test_the_marks_cross_the_env_server_wire_and_old_servers_samples_still_give_them():
    sample = marked()
    data = sample_to_data(sample)
    assert data["metadata"] == {"env": "e"}  # the reply is not sent twice
    back = sample_from_data(json.loads(json.dumps(data)))
    assert back == sample and marks(back) == marks(sample)
    # a server from before the fields: the marks only in the metadata
    old = {k: v for k, v in data.items() if k not in ("failure", "completion",
                                                      "replayed_from_version")}
    old["metadata"] = dict(sample.metadata)
    assert marks(sample_from_data(old)) == marks(sample)


def test_the_marks_survive_pickle_and_a_sample_pickled_before_them_reads_none():
    sample = marked()
    back = pickle.loads(pickle.dumps(sample))  # rollout workers (Ray), checkpoints
    assert back == sample and marks(back) == marks(sample)
    back.metadata["completion"] = "edited after the transfer"
    back.sync_marks()
    assert back.completion == "edited after the transfer"
    old = Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[-0.1])
    for name in ("failure", "completion", "replayed_from_version", "_synced_marks"):
        del old.__dict__[name]  # as a checkpoint written before the fields holds it
    restored = pickle.loads(pickle.dumps(old))
    assert marks(restored) == (SampleStatus.COMPLETED, None, None, None)
    restored.validate()
    restored.sync_marks()
    assert restored.metadata == {}


def test_a_shallow_copy_reconciles_its_marks_on_its_own():
    original = marked()
    copied = copy.copy(original)
    copied.metadata = dict(original.metadata)
    copied.completion = "changed in the copy's field"
    copied.sync_marks()
    original.metadata["completion"] = "changed under the original's old key"
    original.sync_marks()
    assert (copied.completion, copied.metadata["completion"]) == (
        "changed in the copy's field",) * 2
    assert (original.completion, original.metadata["completion"]) == (
        "changed under the original's old key",) * 2
