"""The model and its key/value cache: one batched forward pass over new tokens.

The decoder layers are transformers' own (SDPA attention; fp32, or bf16 with
``dtype="bf16"``, the returned logits always fp32); this module
supplies what transformers' generate would otherwise own: a key/value store with one row
("slot") per running sequence, explicit positions and an attention mask per row, so that
sequences of different lengths, admitted at different times, share one forward pass.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterable
from typing import Any

import torch

#: Cache length allocated up front; it doubles as sequences grow (up to the context length).
INITIAL_CACHE_LEN = 256
#: The precisions the engine serves in, by option value.
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class SlotKVCache:
    """Keys and values of every layer, laid out [slot, kv_head, position, head_dim]: the
    running slots ``0 .. n-1`` (the scheduler keeps them there) read as one view in the
    layout attention takes, each head's positions contiguous."""

    def __init__(self, num_layers: int, slots: int, kv_heads: int, head_dim: int,
                 max_len: int, dtype: torch.dtype) -> None:
        self.max_len = max_len
        shape = (slots, kv_heads, min(INITIAL_CACHE_LEN, max_len), head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    @property
    def heads(self) -> int:
        return self.keys[0].shape[1]

    def reserve(self, length: int) -> None:
        """Make room for positions ``0 .. length-1`` in every slot."""
        if length <= self.capacity:
            return
        if length > self.max_len:
            raise ValueError(f"sequence length {length} exceeds the context length {self.max_len}")
        new_len = min(self.max_len, max(length, 2 * self.capacity))

        def grown(t: torch.Tensor) -> torch.Tensor:
            slots, heads, length, dim = t.shape
            extra = torch.zeros((slots, heads, new_len - length, dim), dtype=t.dtype)
            return torch.cat([t, extra], dim=2)

        self.keys = [grown(t) for t in self.keys]
        self.values = [grown(t) for t in self.values]

    def copy_prefix(self, source: int, targets: list[int], length: int) -> None:
        """Positions ``0 .. length-1`` of slot ``source`` into the ``targets`` slots."""
        index = torch.tensor(targets)
        for store in self.keys + self.values:
            store[index, :, :length] = store[source, :, :length]


class _BatchCacheView:
    """What the attention layers call ``update`` on during one forward pass."""

    def __init__(self, store: SlotKVCache, slots: list[int], positions: torch.Tensor,
                 kv_len: int) -> None:
        self.store = store
        index = torch.tensor(slots)
        # Where each new token's key/value goes among a layer's [slot, head, position] rows:
        # computed once, written with one index_copy_ per tensor and layer.
        heads, capacity = store.heads, store.capacity
        self.flat = ((index[:, None, None] * heads + torch.arange(heads)[None, :, None])
                     * capacity + positions[:, None, :]).flatten()
        self.kv_len = kv_len
        # Consecutive ascending slots (the scheduler keeps the running ones in 0 .. n-1) are
        # read as a view; any other set is gathered (a copy).
        consecutive = slots == list(range(slots[0], slots[0] + len(slots)))
        self.rows: slice | torch.Tensor = (slice(slots[0], slots[0] + len(slots))
                                           if consecutive else index)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Store [B, kv_heads, T, D] new keys/values; return [B, kv_heads, kv_len, D] views."""
        keys, values = self.store.keys[layer_idx], self.store.values[layer_idx]
        dim = keys.shape[-1]
        for store, new in ((keys, key_states), (values, value_states)):
            store.view(-1, dim).index_copy_(0, self.flat, new.reshape(-1, dim))
        return keys[self.rows, :, : self.kv_len], values[self.rows, :, : self.kv_len]


class ModelRunner:
    """Loads a Hugging Face causal LM and runs batched forward passes with a slot KV cache.

    ``dtype`` (``fp32`` or ``bf16``) is the precision of the weights, the cache and the
    computation, whatever the checkpoint's; loaded and received weights are cast to it."""

    def __init__(self, model_dir: str | pathlib.Path, max_batch_size: int,
                 dtype: str = "fp32") -> None:
        from transformers import AutoModelForCausalLM

        self.model_dir = str(model_dir)
        self.dtype = DTYPES[dtype]
        self.model = AutoModelForCausalLM.from_pretrained(
            self.model_dir, dtype=self.dtype, attn_implementation="sdpa").eval()
        config = self.model.config
        self.config = config
        self.vocab_size: int = config.vocab_size
        self.context_len: int = config.max_position_embeddings
        self.eos_token_ids: frozenset[int] = _eos_ids(self.model_dir, config)
        head_dim = getattr(config, "head_dim", None) or (
            config.hidden_size // config.num_attention_heads)
        self.cache = SlotKVCache(config.num_hidden_layers, max_batch_size,
                                 config.num_key_value_heads, head_dim, self.context_len,
                                 self.dtype)
        from rollyard_plugins.embedded_engine.fused import FusedDecoder, unsupported

        #: The fused decoder layers, or None: transformers' own layers for other models.
        self.fused = FusedDecoder(self.model) if unsupported(config) is None else None
        from rollyard_plugins.embedded_engine.checkpoint_names import checkpoint_tensors

        #: The served tensors by their checkpoint names (views of the parameters and buffers,
        #: which loads write in place, so built once).
        self._tensors: dict[str, torch.Tensor] = checkpoint_tensors(self.model)

    @torch.inference_mode()
    def forward(self, new_tokens: list[list[int]], starts: list[int],
                slots: list[int]) -> torch.Tensor:
        """Feed ``new_tokens[b]`` to the sequence in slot ``slots[b]`` at positions
        ``starts[b]...``; return the logits [B, V] (fp32) after each row's last new token."""
        lengths = torch.tensor([len(t) for t in new_tokens])
        width = int(lengths.max())
        ids = torch.tensor([t + [0] * (width - len(t)) for t in new_tokens])
        start = torch.tensor(starts)
        positions = start[:, None] + torch.arange(width)[None, :]
        kv_len = int(positions.max()) + 1
        self.cache.reserve(kv_len)
        # Row b's query at position p sees keys 0..p of its own slot. Padding queries (past a
        # row's length) see only their own row too; their outputs are never read and their
        # cache entries are overwritten before any real query can see them.
        mask = (torch.arange(kv_len)[None, None, :] <= positions[:, :, None])[:, None]
        view = _BatchCacheView(self.cache, slots, positions, kv_len)
        backbone = self.model.model
        if self.fused is not None:
            hidden = self.fused.forward(ids, positions, mask, view)
        else:
            hidden = backbone.embed_tokens(ids)
            rotary = backbone.rotary_emb(hidden, positions)
            for layer in backbone.layers:
                hidden = layer(hidden, attention_mask=mask, position_ids=positions, cache=view,
                               position_embeddings=rotary)
        last = backbone.norm(hidden[torch.arange(len(new_tokens)), lengths - 1])
        logits = self.model.lm_head(last) if self.fused is None else self.fused.logits(last)
        return logits.float()

    @torch.inference_mode()
    def copy_prefix(self, source: int, targets: list[int], length: int) -> None:
        """Copy the keys and values of positions ``0 .. length-1`` of slot ``source`` into
        the ``targets`` slots (a shared prompt prefilled once; a sequence moving slots)."""
        self.cache.copy_prefix(source, targets, length)

    def load_weights(self, model_dir: str | pathlib.Path) -> None:
        """Replace the weights in place with the checkpoint in ``model_dir`` (same shapes).

        Raises ValueError naming the folder and the mismatching tensors.
        """
        from safetensors.torch import load_file

        folder = pathlib.Path(model_dir)
        index = folder / "model.safetensors.index.json"
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        missing_files = [f for f in files if not (folder / f).is_file()]
        if missing_files:
            raise ValueError(f"{folder}: no {', '.join(missing_files)}")
        state: dict[str, torch.Tensor] = {}
        for name in files:
            state.update(load_file(str(folder / name)))
        self.load_tensors(state.items(), f"checkpoint {folder}", complete=True)
        self.model_dir = str(folder)

    def load_tensors(self, tensors: Iterable[tuple[str, torch.Tensor]], where: str,
                     complete: bool = False) -> list[str]:
        """Copy Hugging Face named tensors into the served model's parameters, in place.

        Every name must be one of the model's and every shape must match; with ``complete``
        every parameter must be given (a partial update, as one bucket of an in-memory sync
        is, leaves the others unchanged). Checked before anything is written: raises
        ValueError naming ``where`` and the offending tensors. Returns the names written.
        """
        state = dict(tensors)
        own = self._tensors
        unknown = sorted(set(state) - set(own))
        wrong = sorted(f"{k} {tuple(state[k].shape)} (served {tuple(own[k].shape)})"
                       for k in set(state) & set(own) if state[k].shape != own[k].shape)
        absent: list[str] = []
        if complete:
            absent = sorted(set(own) - set(state))
            if self.config.tie_word_embeddings and "lm_head.weight" in absent:
                absent.remove("lm_head.weight")
        if unknown or absent or wrong:
            raise ValueError(f"{where} does not match the served model "
                             f"(unexpected {unknown[:5]}, missing {absent[:5]}, "
                             f"wrong shape {wrong[:5]})")
        with torch.no_grad():
            for key, tensor in state.items():
                own[key].copy_(tensor)
        return sorted(state)


def _eos_ids(model_dir: str, config: Any) -> frozenset[int]:
    """End-of-sequence ids from generation_config.json, else config.json."""
    ids: Any = None
    generation = pathlib.Path(model_dir) / "generation_config.json"
    if generation.is_file():
        ids = json.loads(generation.read_text()).get("eos_token_id")
    if ids is None:
        ids = config.eos_token_id
    if ids is None:
        return frozenset()
    return frozenset([ids] if isinstance(ids, int) else ids)
