"""Turn samples into right-padded micro-batches aligned for next-token prediction.

Position ``t`` of a micro-batch predicts token ``t + 1``; response token ``i`` of a sample
(absolute position ``prompt_len + i``) is therefore scored at position ``prompt_len + i - 1``.
Padding sits at the right end of each row, so with causal attention it never influences the
real tokens, and its mask is zero.

Only the positions that can predict a response token are scored: a micro-batch's per-token
tensors start at column ``scored_from`` (its shortest prompt, less one), so the model's output
layer, the log-softmax and the loss skip the prompt positions before it (most of a row when
prompts are long and responses short, as in most RL tasks).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rollyard.errors import ConfigError


@dataclass
class TrainItem:
    """One sample reduced to what a rank needs: plain lists, cheap to send to Ray actors."""

    tokens: list[int]
    prompt_len: int
    loss_mask: list[int]
    logprobs: list[float]
    advantage: float
    #: The trainer's own logprobs before the step's first update (only with truncated
    #: importance sampling over several mini-batches): the ratio's denominator.
    trainer_logprobs: list[float] | None = None


@dataclass
class MicroBatch:
    """Tensors of one forward/backward pass.

    ``input_ids`` and ``position_ids`` are [b, s]; the per-token tensors are [b, s - f] with
    ``f = scored_from``: their column ``j`` is position ``f + j``, which predicts token
    ``f + j + 1``.
    """

    input_ids: torch.Tensor  # [b, s] long
    position_ids: torch.Tensor  # [b, s] long
    targets: torch.Tensor  # [b, s - f] long, the token each scored position predicts
    old_logprobs: torch.Tensor  # [b, s - f] float, rollout logprobs
    advantages: torch.Tensor  # [b, s - f] float
    mask: torch.Tensor  # [b, s - f] float, 1 on trained response tokens
    trainer_logprobs: torch.Tensor | None = None  # [b, s - f] float, see TrainItem
    scored_from: int = 0  # first position that predicts a response token in some row

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def check_item(item: TrainItem, where: str, max_len: int, vocab_size: int) -> None:
    """ConfigError when a sample cannot be trained on: no prompt, unknown token ids, or longer
    than ``max_len`` (the train group fails such samples before they get here)."""
    if item.prompt_len < 1:
        raise ConfigError(f"{where}: prompt_len is {item.prompt_len}; the trainer needs at "
                          "least one prompt token to score the first response token")
    if len(item.tokens) > max_len:
        raise ConfigError(f"{where}: {len(item.tokens)} tokens exceed the model's "
                          f"max_position_embeddings={max_len}")
    if item.tokens and max(item.tokens) >= vocab_size:
        raise ConfigError(f"{where}: token id {max(item.tokens)} is outside the model's "
                          f"vocabulary of {vocab_size}")


def scored_from(items: list[TrainItem]) -> int:
    """The first position of a micro-batch of ``items`` that predicts a response token."""
    return min(item.prompt_len for item in items) - 1


def response_columns(item: TrainItem, first: int) -> slice:
    """The columns, in per-token tensors that start at position ``first``, of the positions
    that predict ``item``'s response tokens."""
    return slice(item.prompt_len - 1 - first, len(item.tokens) - 1 - first)


def _response_rows(items: list[TrainItem], values: list[list[float]], first: int,
                   width: int) -> list[list[float]]:
    """Each item's per-response-token ``values`` at the positions that predict those tokens,
    zero elsewhere, as rows of positions ``first`` to ``width - 1``."""
    rows = []
    for item, row_values in zip(items, values):
        columns = response_columns(item, first)
        rows.append([0.0] * columns.start + list(row_values)
                    + [0.0] * (width - first - columns.stop))
    return rows


def collate(items: list[TrainItem]) -> MicroBatch:
    """Right-pad ``items`` into one micro-batch.

    The rows are built as Python lists and turned into tensors once per field: tensor
    operations per row cost about a tenth of a toy update (128 short samples) on a CPU.
    """
    width = max(len(item.tokens) for item in items)
    first = scored_from(items)
    input_ids = torch.tensor([item.tokens + [0] * (width - len(item.tokens)) for item in items])
    targets = torch.tensor([item.tokens[first + 1:] + [0] * (width - len(item.tokens) + 1)
                            for item in items])

    def response(values: list[list[float]]) -> torch.Tensor:
        return torch.tensor(_response_rows(items, values, first, width), dtype=torch.float32)

    old_logprobs = response([item.logprobs for item in items])
    mask = response([item.loss_mask for item in items])
    advantages = response([[item.advantage] * len(item.loss_mask) for item in items])
    trainer = (response([item.trainer_logprobs for item in items])  # type: ignore[misc]
               if all(item.trainer_logprobs is not None for item in items) else None)
    position_ids = torch.arange(width).unsqueeze(0).expand(len(items), -1).contiguous()
    return MicroBatch(input_ids, position_ids, targets, old_logprobs, advantages, mask, trainer,
                      first)


def chunks(items: list[TrainItem], max_rows: int,
           max_tokens: int | None = None) -> list[list[TrainItem]]:
    """``items`` in order, cut into consecutive runs of at most ``max_rows`` rows whose padded
    size (rows × longest) stays within ``max_tokens``; a longer item is a run of its own."""
    runs: list[list[TrainItem]] = []
    current: list[TrainItem] = []
    width = 0
    for item in items:
        wider = max(width, len(item.tokens))
        if current and (len(current) == max_rows
                        or (max_tokens is not None and wider * (len(current) + 1) > max_tokens)):
            runs.append(current)
            current, wider = [], len(item.tokens)
        current.append(item)
        width = wider
    return [*runs, current] if current else runs


def micro_batches(items: list[TrainItem], micro_batch_size: int,
                  micro_batch_tokens: int | None = None) -> list[MicroBatch]:
    """Micro-batches of at most ``micro_batch_size`` rows and ``micro_batch_tokens`` padded
    tokens, sorted by length to cut padding."""
    ordered = sorted(items, key=lambda item: len(item.tokens))
    return [collate(run) for run in chunks(ordered, micro_batch_size, micro_batch_tokens)]


def split_for_data_parallel(items: list[TrainItem], dp: int) -> list[list[TrainItem]]:
    """Deal items to ``dp`` ranks, longest first to the rank with the fewest tokens so far."""
    shares: list[list[TrainItem]] = [[] for _ in range(dp)]
    loads = [0] * dp
    for item in sorted(items, key=lambda it: len(it.tokens), reverse=True):
        rank = min(range(dp), key=lambda r: (loads[r], len(shares[r])))
        shares[rank].append(item)
        loads[rank] += len(item.tokens)
    return shares
