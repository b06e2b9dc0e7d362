"""Turn samples into micro-batches: the rows the model reads and the response tokens it scores.

A row holds one sample's tokens, or a prompt once followed by the responses of several samples
that share it (``share_prompts``: a group's samples all start with the same prompt, which is
then computed once instead of once per sample). Each response in a shared row sees the prompt
and its own earlier tokens only: the row's attention mask hides the other responses, and its
position ids restart after the prompt for each response, so every token is computed exactly as
in a row of its own.

The loss works on per-token tensors [n, t] with one row per sample and one column per response
token: column ``j`` of sample ``i`` is its response token ``j``, predicted by the hidden state
at row ``score_rows[i, j]``, position ``score_positions[i, j]`` of the model's input (the last
prompt position for ``j = 0``, else the position of response token ``j - 1``). Only those
positions reach the output layer, the log-softmax and the loss. A sample's last token predicts
nothing and is not fed to the model.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from rollyard.errors import ConfigError

#: A shared row holds at most this many times the tokens of its micro-batch's longest sample:
#: its attention grows with the square of its length.
SHARED_ROW_FACTOR = 4


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

    @property
    def response_len(self) -> int:
        return len(self.tokens) - self.prompt_len


@dataclass
class MicroBatch:
    """Tensors of one forward/backward pass: the model's input [r, s] and, per sample, its
    response tokens [n, t] (see the module's docstring)."""

    input_ids: torch.Tensor  # [r, s] long
    position_ids: torch.Tensor  # [r, s] long
    score_rows: torch.Tensor  # [n, t] long, the input row that predicts each response token
    score_positions: torch.Tensor  # [n, t] long, and its position in that row
    targets: torch.Tensor  # [n, t] long, the response tokens
    old_logprobs: torch.Tensor  # [n, t] float, rollout logprobs
    advantages: torch.Tensor  # [n, t] float
    mask: torch.Tensor  # [n, t] float, 1 on trained response tokens
    trainer_logprobs: torch.Tensor | None = None  # [n, t] float, see TrainItem
    #: [r, 1, s, s] bool, True where a query must not see a key; None: plain causal rows
    attention_mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.targets.shape[0]

    def to(self, device: torch.device | str) -> MicroBatch:
        tensors = {f.name: getattr(self, f.name) for f in fields(self)}
        return MicroBatch(**{name: None if t is None else t.to(device)
                             for name, t in tensors.items()})


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


def _rows(items: list[TrainItem], share_prompts: bool) -> list[list[int]]:
    """Which items each input row holds: one each, or runs of items with the same prompt
    when sharing pays (the prompt at least as long as their mean response), each run within
    SHARED_ROW_FACTOR × the longest item's tokens."""
    if not share_prompts:
        return [[i] for i in range(len(items))]
    by_prompt: dict[tuple[int, ...], list[int]] = {}
    for i, item in enumerate(items):
        by_prompt.setdefault(tuple(item.tokens[:item.prompt_len]), []).append(i)
    limit = SHARED_ROW_FACTOR * max(len(item.tokens) for item in items)
    rows = []
    for prompt, members in by_prompt.items():
        mean_response = sum(items[i].response_len for i in members) / len(members)
        if len(prompt) < mean_response:
            rows += [[i] for i in members]
            continue
        row, length = [], len(prompt)
        for i in members:
            extra = items[i].response_len - 1  # a response's last token is not fed
            if row and length + extra > limit:
                rows.append(row)
                row, length = [], len(prompt)
            row.append(i)
            length += extra
        rows.append(row)
    return rows


def collate(items: list[TrainItem], share_prompts: bool = False) -> MicroBatch:
    """One micro-batch of ``items`` (rows right-padded); with ``share_prompts`` the items with
    one prompt share a row where that pays.

    The rows are built as Python lists and turned into tensors once per field: tensor
    operations per row cost about a tenth of a toy update (128 short samples) on a CPU.
    """
    rows = _rows(items, share_prompts)
    tokens: list[list[int]] = []
    positions: list[list[int]] = []
    segments: list[list[int]] = []  # 0 for the prompt, k for the row's k-th response
    score_rows: list[list[int]] = [[] for _ in items]
    score_positions: list[list[int]] = [[] for _ in items]
    for r, members in enumerate(rows):
        prompt_len = items[members[0]].prompt_len
        row = items[members[0]].tokens[:prompt_len]
        row_positions, row_segments = list(range(prompt_len)), [0] * prompt_len
        for k, i in enumerate(members, start=1):
            response = items[i].tokens[prompt_len:-1]
            score_rows[i] = [r] * items[i].response_len
            fed = range(len(row), len(row) + len(response))
            score_positions[i] = [prompt_len - 1, *fed][:items[i].response_len]
            row = row + response
            row_positions += range(prompt_len, prompt_len + len(response))
            row_segments += [k] * len(response)
        tokens.append(row)
        positions.append(row_positions)
        segments.append(row_segments)
    width = max(len(row) for row in tokens)
    longest = max(item.response_len for item in items)

    def padded(rows_: list[list], fill: float | int) -> list[list]:
        return [list(row) + [fill] * (width - len(row)) for row in rows_]

    def per_response(values: list, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.tensor([list(v) + [0] * (longest - len(v)) for v in values], dtype=dtype)

    trainer = (per_response([item.trainer_logprobs for item in items])
               if all(item.trainer_logprobs is not None for item in items) else None)
    mask = None
    if any(len(members) > 1 for members in rows):
        segment = torch.tensor(padded(segments, -1))  # padding: a segment of its own
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        visible = (segment[:, None, :] == 0) | (segment[:, None, :] == segment[:, :, None])
        mask = ~(causal & visible).unsqueeze(1)
    return MicroBatch(
        torch.tensor(padded(tokens, 0)), torch.tensor(padded(positions, 0)),
        per_response(score_rows, torch.long), per_response(score_positions, torch.long),
        per_response([item.tokens[item.prompt_len:] for item in items], torch.long),
        per_response([item.logprobs for item in items]),
        per_response([[item.advantage] * len(item.loss_mask) for item in items]),
        per_response([item.loss_mask for item in items]), trainer, mask)


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
                  micro_batch_tokens: int | None = None,
                  share_prompts: bool = False) -> list[MicroBatch]:
    """Micro-batches of at most ``micro_batch_size`` samples and ``micro_batch_tokens`` padded
    tokens (counted as if each sample had a row of its own), sorted by length to cut padding;
    with ``share_prompts`` the samples of one prompt stay together and share its rows."""
    if share_prompts:
        ordered = sorted(items, key=lambda item: (item.prompt_len, item.tokens[:item.prompt_len],
                                                  len(item.tokens)))
    else:
        ordered = sorted(items, key=lambda item: len(item.tokens))
    return [collate(run, share_prompts)
            for run in chunks(ordered, micro_batch_size, micro_batch_tokens)]


def split_for_data_parallel(items: list[TrainItem], dp: int) -> list[list[TrainItem]]:
    """Deal items to ``dp`` ranks, longest first to the rank with the fewest tokens so far."""
    shares: list[list[TrainItem]] = [[] for _ in range(dp)]
    loads = [0] * dp
    for item in sorted(items, key=lambda it: len(it.tokens), reverse=True):
        rank = min(range(dp), key=lambda r: (loads[r], len(shares[r])))
        shares[rank].append(item)
        loads[rank] += len(item.tokens)
    return shares
