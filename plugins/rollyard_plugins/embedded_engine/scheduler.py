"""Continuous batching: one thread owns the model and steps every running sequence together.

New requests are prefilled as soon as a slot is free and join the running batch at the next
decode step; finished sequences leave it at once. Weight updates happen between steps: with
the ``wait`` policy no new sequence starts until the running ones finish, with ``abort`` the
running ones end with finish reason ``abort``; either way no response mixes two weight
versions.
"""

from __future__ import annotations

import heapq
import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from rollyard_plugins.embedded_engine.model_runner import ModelRunner
from rollyard_plugins.embedded_engine.sampling import BatchOptions, SamplingOptions, sample_next

log = logging.getLogger("rollyard.embedded_engine")

WEIGHT_UPDATE_POLICIES = ("wait", "abort")
#: Most prompt tokens prefilled in one forward pass.
PREFILL_TOKEN_BUDGET = 8192


#: Seeds the generators of unseeded requests (``random.Random()`` would read the OS's
#: entropy for each one).
_ENTROPY = random.Random()


@dataclass(eq=False)
class Sequence:
    """One generation request as the scheduler tracks it (compared by identity: finishing
    one is a list lookup, not a field-by-field comparison of every running sequence)."""

    rid: str
    prompt: list[int]
    options: SamplingOptions
    on_done: Callable[[Sequence], None]
    output: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: dict[str, Any] | None = None
    weight_version: str = ""
    slot: int = -1
    rng: random.Random = field(default_factory=lambda: random.Random(_ENTROPY.getrandbits(64)))
    started: float = field(default_factory=time.monotonic)
    prompt_key: tuple[int, ...] = ()

    @property
    def length(self) -> int:
        return len(self.prompt) + len(self.output)


@dataclass
class _SharedPrompt:
    """A prompt prefilled once: its next-token logits, and the running sequences whose slots
    hold its keys and values (any of them is the source of a copy)."""

    logits: torch.Tensor
    holders: list[Sequence]


@dataclass
class _WeightUpdate:
    #: The checkpoint folder, or (with ``tensors``) where the tensors came from.
    model_dir: str
    weight_version: str
    abort_running: bool
    done: Future
    #: Named tensors received in memory (a distributed update); None loads ``model_dir``.
    tensors: list[tuple[str, torch.Tensor]] | None = None


class Scheduler:
    """Owns the :class:`ModelRunner`; other threads talk to it only through its inbox.

    The model is loaded in the scheduler's own thread, which then runs every forward pass:
    torch's CPU thread pool is fast only from the thread that first used it (driving a pool
    set up by another thread made decode steps about 4x slower).
    """

    def __init__(self, load_runner: Callable[[], ModelRunner], max_batch_size: int,
                 weight_version: str = "0", weight_update_policy: str = "wait",
                 threads: int = 0) -> None:
        if weight_update_policy not in WEIGHT_UPDATE_POLICIES:
            raise ValueError(f"weight update policy {weight_update_policy!r}: expected one of "
                             f"{list(WEIGHT_UPDATE_POLICIES)}")
        self._load_runner = load_runner
        self._threads = threads
        self._loaded = threading.Event()
        self._load_error: BaseException | None = None
        self.runner: ModelRunner | None = None
        self.weight_version = weight_version
        self.weight_update_policy = weight_update_policy
        self._inbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        #: Held by the scheduler thread while it changes its state or runs the model.
        self._lock = threading.Lock()
        self._waiting: list[Sequence] = []
        self._running: list[Sequence] = []
        self._free_slots = list(range(max_batch_size))  # a heap: the lowest free slot first
        self._updates: list[_WeightUpdate] = []
        #: Bumped whenever the running batch changes; keys the cached sampling tensors.
        self._batch_generation = 0
        self._decode_options: tuple[int, BatchOptions] | None = None
        #: Prompts whose keys and values sit in a running sequence's slot, for sharing.
        self._prompts: dict[tuple[int, ...], _SharedPrompt] = {}
        self._thread = threading.Thread(target=self._main, name="engine-scheduler", daemon=True)
        self._stopped = False
        #: Counters since start, shown by /get_server_info (how well requests were batched).
        self.stats = {"decode_steps": 0, "prefill_passes": 0, "shared_prefills": 0,
                      "generated_tokens": 0, "max_running": 0}

    # ------------------------------------------------------------------ other threads

    def start(self) -> ModelRunner:
        """Start the thread, wait until it has loaded the model and return the runner;
        re-raises the error if loading failed."""
        self._thread.start()
        self._loaded.wait()
        if self._load_error is not None:
            raise self._load_error
        assert self.runner is not None
        return self.runner

    def stop(self) -> None:
        self._inbox.put(("stop", None))
        self._thread.join(timeout=30)

    def submit(self, *seqs: Sequence) -> None:
        """Queue sequences; those submitted together are admitted together (as slots allow)."""
        for seq in seqs:
            if seq.options.seed is not None:
                seq.rng = random.Random(seq.options.seed)
        self._inbox.put(("generate", list(seqs)))

    def abort(self, rid: str | None) -> None:
        """Abort request ``rid``, or every request when ``rid`` is None."""
        self._inbox.put(("abort", rid))

    def update_weights(self, model_dir: str, weight_version: str,
                       abort_running: bool | None = None) -> Future:
        """Load ``model_dir`` between steps; the future resolves to (success, message)."""
        if abort_running is None:
            abort_running = self.weight_update_policy == "abort"
        done: Future = Future()
        self._inbox.put(("update", _WeightUpdate(model_dir, weight_version, abort_running, done)))
        return done

    def load_tensors(self, tensors: list[tuple[str, torch.Tensor]], source: str,
                     weight_version: str, abort_running: bool | None = None) -> Future:
        """Copy received tensors into the model between steps, under the same policy as
        :meth:`update_weights`; the future resolves to (success, message)."""
        if abort_running is None:
            abort_running = self.weight_update_policy == "abort"
        done: Future = Future()
        update = _WeightUpdate(source, weight_version, abort_running, done, tensors)
        # An idle engine copies them at once, on the caller's thread, instead of waking the
        # scheduler thread and waiting for it (what an in-memory update mostly costs).
        if self._lock.acquire(blocking=False):
            try:
                if self.runner is not None and not (self._running or self._updates):
                    self._load(update)
                    return done
            finally:
                self._lock.release()
        self._inbox.put(("update", update))
        return done

    @property
    def load(self) -> dict[str, int]:
        return {"running": len(self._running), "waiting": len(self._waiting)}

    # ------------------------------------------------------------------ scheduler thread

    def _main(self) -> None:
        try:
            if self._threads > 0:
                torch.set_num_threads(self._threads)
            self.runner = self._load_runner()
        except BaseException as exc:
            self._load_error = exc
            return
        finally:
            self._loaded.set()
        self._loop()

    def _loop(self) -> None:
        while not self._stopped:
            idle = not (self._running or self._waiting or self._updates)
            items = self._drain_inbox(block=idle)
            with self._lock:
                for item in items:
                    self._handle(*item)
                try:
                    self._step()
                except Exception as exc:  # a bug or a bad checkpoint must not hang clients
                    log.exception("engine step failed")
                    for seq in self._running + self._waiting:
                        self._finish(seq, {"type": "abort", "message": f"engine error: {exc}",
                                           "status_code": 500,
                                           "err_type": "InternalServerError"})
                    self._waiting.clear()
        for seq in self._running + self._waiting:
            self._finish(seq, {"type": "abort", "message": "engine shutting down"})

    def _drain_inbox(self, block: bool) -> list[tuple[str, Any]]:
        """Everything in the inbox (waiting up to 0.5 s for something when ``block``)."""
        try:
            items = [self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()]
        except queue.Empty:
            return []
        while True:
            try:
                items.append(self._inbox.get_nowait())
            except queue.Empty:
                return items

    def _handle(self, kind: str, payload: Any) -> None:
        if kind == "generate":
            self._waiting.extend(payload)
        elif kind == "abort":
            for seq in [s for s in self._running + self._waiting
                        if payload is None or s.rid == payload]:
                if seq in self._waiting:
                    self._waiting.remove(seq)
                self._finish(seq, {"type": "abort", "message": "request aborted"})
        elif kind == "update":
            self._updates.append(payload)
        elif kind == "stop":
            self._stopped = True

    def _step(self) -> None:
        if self._updates:
            self._apply_weight_update()
        if not self._updates:
            self._admit()
        if self._running:
            self._decode()

    def _apply_weight_update(self) -> None:
        update = self._updates[0]
        if update.abort_running:
            for seq in list(self._running):
                self._finish(seq, {"type": "abort", "message": "aborted for a weight update"})
        if self._running:
            return  # policy "wait": let them finish on the old weights first
        self._updates.pop(0)
        self._load(update)

    def _load(self, update: _WeightUpdate) -> None:
        self._prompts.clear()  # keys and values of the old weights
        try:
            if update.tensors is not None:
                self.runner.load_tensors(update.tensors, update.model_dir)
            else:
                self.runner.load_weights(update.model_dir)
        except Exception as exc:
            update.done.set_result((False, f"failed to load weights: {exc}"))
            return
        self.weight_version = update.weight_version
        update.done.set_result((True, f"Succeeded to update model weights from "
                                      f"{update.model_dir} (weight_version "
                                      f"{update.weight_version})."))

    def _admit(self) -> None:
        """Start waiting sequences in free slots. A prompt is prefilled once: sequences with
        the same prompt as one started in this pass or still running (a group's samples)
        get a copy of its keys and values and its next-token logits instead."""
        batch: list[Sequence] = []
        fresh: dict[tuple[int, ...], Sequence] = {}
        tokens = 0
        while self._waiting and len(batch) < len(self._free_slots):
            seq = self._waiting[0]
            key = tuple(seq.prompt)
            shared = key in fresh or key in self._prompts
            if batch and not shared and tokens + len(seq.prompt) > PREFILL_TOKEN_BUDGET:
                break
            batch.append(self._waiting.pop(0))
            seq.prompt_key = key
            if not shared:
                fresh[key] = seq
                tokens += len(seq.prompt)
        if not batch:
            return
        for seq in batch:
            seq.slot = heapq.heappop(self._free_slots)
            seq.weight_version = self.weight_version
        if fresh:
            prefill = list(fresh.values())
            logits = self.runner.forward([s.prompt for s in prefill], [0] * len(prefill),
                                         [s.slot for s in prefill])
            self.stats["prefill_passes"] += 1
            for seq, row in zip(prefill, logits):
                self._prompts[seq.prompt_key] = _SharedPrompt(row, [seq])
        copies: dict[tuple[int, ...], list[Sequence]] = {}
        for seq in batch:
            if fresh.get(seq.prompt_key) is not seq:
                copies.setdefault(seq.prompt_key, []).append(seq)
        for key, targets in copies.items():
            shared = self._prompts[key]
            self.runner.copy_prefix(shared.holders[0].slot, [s.slot for s in targets],
                                    len(key))
            shared.holders.extend(targets)
            self.stats["shared_prefills"] += len(targets)
        logits = torch.stack([self._prompts[s.prompt_key].logits for s in batch])
        self._running.extend(batch)
        self._batch_generation += 1
        self.stats["max_running"] = max(self.stats["max_running"], len(self._running))
        self._append(batch, logits, self._batch_options(batch))

    def _decode(self) -> None:
        batch = list(self._running)
        logits = self.runner.forward([[s.output[-1]] for s in batch],
                                     [s.length - 1 for s in batch], [s.slot for s in batch])
        self.stats["decode_steps"] += 1
        if self._decode_options is None or self._decode_options[0] != self._batch_generation:
            self._decode_options = (self._batch_generation, self._batch_options(batch))
        self._append(batch, logits, self._decode_options[1])

    def _batch_options(self, batch: list[Sequence]) -> BatchOptions:
        return BatchOptions.of([s.options for s in batch], self.runner.vocab_size)

    def _append(self, batch: list[Sequence], logits: Any, options: BatchOptions) -> None:
        eos = self.runner.eos_token_ids
        if options.holds_stops:
            logits = self._suppress_early_stops(batch, logits, eos)
        tokens, logprobs = sample_next(logits, options, [s.rng for s in batch])
        self.stats["generated_tokens"] += len(tokens)
        for seq, token, logprob in zip(batch, tokens, logprobs):
            seq.output.append(token)
            seq.logprobs.append(logprob)
            if token in seq.options.stop_token_ids or (token in eos and
                                                       not seq.options.ignore_eos):
                self._finish(seq, {"type": "stop", "matched": token})
            elif len(seq.output) >= seq.options.max_new_tokens:
                self._finish(seq, {"type": "length", "length": seq.options.max_new_tokens})

    @staticmethod
    def _suppress_early_stops(batch: list[Sequence], logits: torch.Tensor,
                              eos: frozenset[int]) -> torch.Tensor:
        """``min_new_tokens`` as SGLang applies it: until a sequence has that many tokens, its
        stop tokens (and end-of-sequence unless ignored) get logit -inf, so they are neither
        drawn nor counted in the distribution the logprob is taken from."""
        rows: list[int] = []
        cols: list[int] = []
        for b, seq in enumerate(batch):
            if len(seq.output) < seq.options.min_new_tokens:
                stops = seq.options.stop_token_ids | (frozenset() if seq.options.ignore_eos
                                                      else eos)
                rows.extend([b] * len(stops))
                cols.extend(stops)
        if not rows:
            return logits
        return logits.index_put((torch.tensor(rows), torch.tensor(cols)),
                                torch.tensor(float("-inf"), dtype=logits.dtype))

    def _release_slot(self, seq: Sequence) -> None:
        """Take ``seq`` out of the running batch. The running sequences stay in slots
        ``0 .. n-1``, in slot order: the one in the highest slot moves (its keys and values
        copied) into the freed one. So each decode step reads one contiguous block of the
        cache instead of gathering a copy of every row, layer by layer."""
        index = self._running.index(seq)
        self._running.pop(index)
        self._batch_generation += 1
        last = self._running[-1] if self._running else None
        if last is None or last.slot < seq.slot:
            heapq.heappush(self._free_slots, seq.slot)
            return
        self.runner.copy_prefix(last.slot, [seq.slot], last.length)
        heapq.heappush(self._free_slots, last.slot)
        last.slot = seq.slot
        self._running.pop()
        self._running.insert(index, last)

    def _finish(self, seq: Sequence, reason: dict[str, Any]) -> None:
        seq.finish_reason = reason
        if not seq.weight_version:  # aborted before it started: the weights served now
            seq.weight_version = self.weight_version
        if seq in self._running:
            self._release_slot(seq)
            shared = self._prompts.get(seq.prompt_key)
            if shared is not None:
                shared.holders = [s for s in shared.holders if s is not seq]
                if not shared.holders:
                    del self._prompts[seq.prompt_key]
        try:
            seq.on_done(seq)
        except Exception:
            log.exception("delivering the result of request %s failed", seq.rid)
