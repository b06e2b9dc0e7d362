"""Micro-batches: alignment of response data to predicting positions, padding, DP dealing."""

from __future__ import annotations

import pytest
import torch
from rollyard import ConfigError
from rollyard.training.batching import (
    TrainItem,
    check_item,
    chunks,
    collate,
    micro_batches,
    split_for_data_parallel,
)


def _item(n_prompt: int, n_response: int, advantage: float = 1.0) -> TrainItem:
    tokens = list(range(10, 10 + n_prompt + n_response))
    return TrainItem(tokens, n_prompt, [1] * (n_response - 1) + [0],
                     [-0.1 * (i + 1) for i in range(n_response)], advantage)


def _scored_inputs(batch, i: int) -> list[int]:
    """The input token at each position that predicts a response token of item ``i``."""
    return [int(batch.input_ids[r, p]) for r, p in zip(batch.score_rows[i].tolist(),
                                                         batch.score_positions[i].tolist())]


def test_each_response_token_is_scored_at_the_position_before_it() -> None:
    item, short = _item(3, 4, advantage=2.0), _item(1, 2, advantage=-1.0)
    batch = collate([item, short])
    # a row per item; the last token predicts nothing and is not fed
    assert batch.input_ids.tolist() == [item.tokens[:-1], short.tokens[:-1] + [0] * 4]
    assert batch.position_ids[0].tolist() == list(range(6)) and batch.attention_mask is None
    assert batch.score_rows[0].tolist() == [0] * 4 and batch.score_rows[1, :2].tolist() == [1, 1]
    assert batch.score_positions[0].tolist() == [2, 3, 4, 5]  # position t predicts t + 1
    assert _scored_inputs(batch, 0) == item.tokens[2:6]
    assert batch.targets[0].tolist() == item.tokens[3:]
    assert batch.targets[1, :2].tolist() == short.tokens[1:]
    assert batch.old_logprobs[0].tolist() == pytest.approx(item.logprobs)
    assert batch.mask.tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert batch.advantages.tolist() == [[2.0] * 4, [-1.0, -1.0, 0, 0]]


def test_samples_of_one_prompt_share_a_row_and_see_only_the_prompt_and_themselves() -> None:
    prompt = [7, 8, 9]
    first = TrainItem([*prompt, 20, 21, 22], 3, [1, 1, 1], [-1.0, -2.0, -3.0], 1.0)
    second = TrainItem([*prompt, 30, 31], 3, [1, 1], [-4.0, -5.0], -1.0)
    other = _item(3, 2)
    batch = collate([first, other, second], share_prompts=True)
    assert batch.input_ids.tolist() == [[7, 8, 9, 20, 21, 30], [10, 11, 12, 13, 0, 0]]
    # each response's positions continue the prompt's
    assert batch.position_ids[0].tolist() == [0, 1, 2, 3, 4, 3]
    assert batch.score_rows[:, :2].tolist() == [[0, 0], [1, 1], [0, 0]]
    assert batch.score_positions[0].tolist() == [2, 3, 4]
    assert batch.score_positions[2, :2].tolist() == [2, 5]  # the prompt's end, then 30
    assert batch.targets[2, :2].tolist() == [30, 31]
    assert batch.old_logprobs[2, :2].tolist() == [-4.0, -5.0] and batch.mask[2, 2] == 0
    hidden = batch.attention_mask[0, 0]  # True: the query (row) must not see the key (column)
    assert not hidden[5, :3].any() and not hidden[5, 5] and hidden[5, 3:5].all()
    assert hidden[4, 5] and not hidden[4, :5].any()  # causal within a response
    assert not batch.attention_mask[1, 0, 3, :4].any() and batch.attention_mask[1, 0, 3, 4:].all()


def test_a_prompt_shorter_than_its_responses_is_not_shared() -> None:
    items = [TrainItem([1, 2, *range(10, 15)], 2, [1] * 5, [-1.0] * 5, 1.0) for _ in range(3)]
    batch = collate(items, share_prompts=True)
    assert batch.input_ids.shape == (3, 6) and batch.attention_mask is None


def test_a_shared_row_stays_within_a_multiple_of_the_longest_sample() -> None:
    from rollyard.training.batching import SHARED_ROW_FACTOR

    prompt = list(range(8))
    items = [TrainItem([*prompt, 50 + i, 60 + i, 70], 8, [1] * 3, [-1.0] * 3, 1.0)
             for i in range(40)]
    batch = collate(items, share_prompts=True)
    # each sample feeds 2 tokens after the prompt: 18 fit in 4 × 11 = 44, so rows of 18, 18, 4
    assert SHARED_ROW_FACTOR * 11 == 44 and batch.input_ids.shape == (3, 44)
    assert [batch.score_rows[:, 0].tolist().count(r) for r in range(3)] == [18, 18, 4]


def test_trainer_logprobs_are_aligned_like_the_rollout_logprobs() -> None:
    items = [_item(2, 3), _item(1, 2)]
    for item in items:
        item.trainer_logprobs = [lp - 1.0 for lp in item.logprobs]
    batch = collate(items)
    assert batch.trainer_logprobs is not None
    expected = torch.tensor([[-1, -1, -1], [-1, -1, 0]], dtype=torch.float32)
    assert torch.allclose(batch.trainer_logprobs - batch.old_logprobs, expected)
    assert collate([_item(1, 2), items[0]]).trainer_logprobs is None


def test_micro_batches_respect_the_size_and_keep_every_item() -> None:
    items = [_item(2, n) for n in (5, 1, 3, 2, 4)]
    batches = micro_batches(items, micro_batch_size=2)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert sum(int(b.mask.sum()) for b in batches) == sum(sum(i.loss_mask) for i in items)
    # sorted by length: the first micro-batch is the narrowest
    assert batches[0].input_ids.shape[1] <= batches[-1].input_ids.shape[1]


def test_shared_micro_batches_keep_a_prompts_samples_together() -> None:
    a = [TrainItem([1, 2, 3, 4, 10 + n, 9], 4, [1, 1], [-1.0] * 2, 1.0) for n in range(3)]
    b = [TrainItem([5, 6, 7, 8, 20 + n, 9], 4, [1, 1], [-1.0] * 2, 1.0) for n in range(3)]
    batches = micro_batches([a[0], b[0], a[1], b[1], a[2], b[2]], micro_batch_size=3,
                            share_prompts=True)
    assert [batch.input_ids.tolist() for batch in batches] == [[[1, 2, 3, 4, 10, 11, 12]],
                                                               [[5, 6, 7, 8, 20, 21, 22]]]


def test_a_token_budget_packs_short_samples_together_and_keeps_long_ones_apart() -> None:
    short, long = [_item(2, 2) for _ in range(6)], _item(2, 10)  # 4 tokens each; 12
    # rows x longest within 12: three short ones per pass; the long one alone (over budget)
    assert [len(run) for run in chunks([*short, long], 100, 12)] == [3, 3, 1]
    # the row bound still applies, and a pass that would widen past the budget is cut first
    assert [len(run) for run in chunks(short, 2, 12)] == [2, 2, 2]
    assert [len(run) for run in chunks([short[0], long, short[1]], 100, 20)] == [1, 1, 1]
    assert [len(run) for run in chunks(short, 100)] == [6]
    batches = micro_batches([long, *short], micro_batch_size=100, micro_batch_tokens=12)
    assert [tuple(b.input_ids.shape) for b in batches] == [(3, 3), (3, 3), (1, 11)]


def test_data_parallel_split_balances_tokens_and_loses_nothing() -> None:
    items = [_item(2, n) for n in (8, 1, 1, 1, 1, 1, 1, 6)]
    shares = split_for_data_parallel(items, 2)
    assert sorted(id(i) for share in shares for i in share) == sorted(id(i) for i in items)
    loads = [sum(len(i.tokens) for i in share) for share in shares]
    assert abs(loads[0] - loads[1]) <= 3
    assert split_for_data_parallel(items[:1], 3)[1:] == [[], []]


def test_items_that_cannot_be_trained_are_rejected_with_their_place() -> None:
    with pytest.raises(ConfigError, match=r"task .t7.*prompt_len is 0"):
        check_item(TrainItem([1, 2], 0, [1, 1], [-1.0, -1.0], 0.0), "task 't7'", 16, 64)
    with pytest.raises(ConfigError, match=r"5 tokens exceed.*max_position_embeddings=4"):
        check_item(_item(2, 3), "task 't8'", 4, 64)
    with pytest.raises(ConfigError, match=r"task 't9': token id 14 is outside .* of 14"):
        check_item(_item(2, 3), "task 't9'", 5, 14)
    check_item(_item(2, 3), "task 't10'", 5, 15)
    assert torch.is_tensor(collate([_item(1, 1)]).mask)
