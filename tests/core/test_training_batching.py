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


def test_response_data_sits_at_the_positions_that_predict_it() -> None:
    item = _item(3, 4, advantage=2.0)
    batch = collate([item, _item(1, 2)])
    assert batch.input_ids.shape == (2, 7)
    # position t predicts token t + 1: response token 0 (position 3) is scored at position 2
    assert batch.targets[0, 2:6].tolist() == item.tokens[3:7]
    assert batch.old_logprobs[0, 2:6].tolist() == pytest.approx(item.logprobs)
    assert batch.mask[0].tolist() == [0, 0, 1, 1, 1, 0, 0]
    assert batch.advantages[0, 2:6].tolist() == [2.0] * 4 and batch.advantages[0, :2].sum() == 0
    assert batch.position_ids[1].tolist() == list(range(7))


def test_only_positions_that_can_predict_a_response_token_are_scored() -> None:
    long, short = _item(4, 3, advantage=2.0), _item(3, 2, advantage=-1.0)
    batch = collate([long, short])
    # the shortest prompt has 3 tokens: positions 0 and 1 predict prompt tokens in every row
    assert batch.scored_from == 2
    assert batch.input_ids.shape == (2, 7) and batch.targets.shape == (2, 5)
    # column j is position 2 + j: long's first response token (position 4) is at column 1
    assert batch.targets[0, 1:4].tolist() == long.tokens[4:7]
    assert batch.old_logprobs[0, 1:4].tolist() == pytest.approx(long.logprobs)
    assert batch.mask.tolist() == [[0, 1, 1, 0, 0], [1, 0, 0, 0, 0]]
    assert batch.advantages[1, :2].tolist() == [-1.0, -1.0] and batch.advantages[1, 2:].sum() == 0
    assert batch.old_logprobs[1, :2].tolist() == pytest.approx(short.logprobs)


def test_trainer_logprobs_are_aligned_like_the_rollout_logprobs() -> None:
    items = [_item(2, 3), _item(1, 2)]
    for item in items:
        item.trainer_logprobs = [lp - 1.0 for lp in item.logprobs]
    batch = collate(items)
    assert batch.trainer_logprobs is not None
    expected = torch.tensor([[0, -1, -1, -1, 0], [-1, -1, 0, 0, 0]], dtype=torch.float32)
    assert torch.allclose(batch.trainer_logprobs - batch.old_logprobs, expected)
    assert collate([_item(1, 2), items[0]]).trainer_logprobs is None


def test_padding_is_on_the_right_and_never_trained() -> None:
    batch = collate([_item(2, 5), _item(1, 2)])
    assert batch.input_ids[1, 3:].tolist() == [0] * 4
    assert batch.mask[1, 2:].sum() == 0 and batch.old_logprobs[1, 2:].sum() == 0


def test_micro_batches_respect_the_size_and_keep_every_item() -> None:
    items = [_item(2, n) for n in (5, 1, 3, 2, 4)]
    batches = micro_batches(items, micro_batch_size=2)
    assert [len(b) for b in batches] == [2, 2, 1]
    assert sum(int(b.mask.sum()) for b in batches) == sum(sum(i.loss_mask) for i in items)
    # sorted by length: the first micro-batch is the narrowest
    assert batches[0].input_ids.shape[1] <= batches[-1].input_ids.shape[1]


def test_a_token_budget_packs_short_samples_together_and_keeps_long_ones_apart() -> None:
    short, long = [_item(2, 2) for _ in range(6)], _item(2, 10)  # 4 tokens each; 12
    # rows x longest within 12: three short ones per pass; the long one alone (over budget)
    assert [len(run) for run in chunks([*short, long], 100, 12)] == [3, 3, 1]
    # the row bound still applies, and a pass that would widen past the budget is cut first
    assert [len(run) for run in chunks(short, 2, 12)] == [2, 2, 2]
    assert [len(run) for run in chunks([short[0], long, short[1]], 100, 20)] == [1, 1, 1]
    assert [len(run) for run in chunks(short, 100)] == [6]
    batches = micro_batches([long, *short], micro_batch_size=100, micro_batch_tokens=12)
    assert [tuple(b.input_ids.shape) for b in batches] == [(3, 4), (3, 4), (1, 12)]


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
