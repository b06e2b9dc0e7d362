"""Tokens/s of one Megatron train step versus a plain PyTorch step of the same model and batch.

Both steps compute the same PPO-clip loss on the same micro-batches of the default tiny model
(one thread each) and take one Adam step with gradient clipping. The plain step is the
transformers model with ``torch.optim.Adam``; the Megatron step is one rank of the trainer
(megatron-core GPTModel, DDP, Megatron optimizer; gloo; the CPU patches). The two alternate
step by step so that load from other processes hits both alike; the plain step runs with torch
function modes disabled, so it does not pay for the CPU patches that only Megatron needs.

Target: Megatron / plain >= 0.6 on CPU. Usage: ``python benchmarks/train_step.py [steps]``.
"""

from __future__ import annotations

import random
import socket
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable

import torch
from rollyard.models.tiny import build_tiny_model
from rollyard.training.algorithm import ppo_clip_loss, token_logprobs
from rollyard.training.batching import TrainItem, micro_batches
from rollyard.training.config import TrainConfig
from rollyard.training.worker import MegatronWorker

SAMPLES, PROMPT, RESPONSE, MICRO_BATCH = 16, 32, 96, 8
# transformers' eager attention is the faster plain baseline for this shape on CPU (SDPA's
# backward is slower here), so the comparison is against the better of the two.
ATTENTION = "eager"
#: PPO's clip range of both steps (the trainer's grpo plugin gets it through TrainConfig)
CLIP_EPS = 0.2


def make_items(vocab: int) -> list[TrainItem]:
    rng = random.Random(0)
    items = []
    for i in range(SAMPLES):
        response = RESPONSE - (i % 4) * 8  # varied lengths, so micro-batches pad
        tokens = [rng.randrange(vocab) for _ in range(PROMPT + response)]
        items.append(TrainItem(tokens, PROMPT, [1] * response, [-6.0] * response,
                               1.0 if i % 2 else -1.0))
    return items


def plain_step(model_dir: str, items: list[TrainItem], config: TrainConfig) -> Callable[[], None]:
    """One step of the same loss on the transformers model with torch.optim.Adam."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation=ATTENTION).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    total = float(sum(sum(item.loss_mask) for item in items))

    def step() -> None:
        optimizer.zero_grad()
        for batch in micro_batches(items, config.micro_batch_size):  # a row per sample
            hidden = model.model(input_ids=batch.input_ids,
                                 position_ids=batch.position_ids).last_hidden_state
            # as the trainer: logits only where a response token is predicted
            logits = model.lm_head(hidden[batch.score_rows, batch.score_positions])
            logprobs, entropy = token_logprobs(logits, batch.targets, config.temperature)
            terms = ppo_clip_loss(logprobs, batch.old_logprobs, batch.advantages, batch.mask,
                                  clip_eps=CLIP_EPS, entropy=entropy.detach())
            (terms.loss / total).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()

    return step


def megatron_step(model_dir: str, items: list[TrainItem],
                  config: TrainConfig) -> Callable[[], None]:
    """One step of the trainer's own rank (world size 1)."""
    worker = MegatronWorker(model_dir, config, tp=1, dp=1, rank=0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    worker.setup("127.0.0.1", port)
    total = float(sum(sum(item.loss_mask) for item in items))
    return lambda: worker.train_step(items, total)


def unpatched(step: Callable[[], None]) -> Callable[[], None]:
    """``step`` with every torch function mode (the CPU patches) switched off."""

    def run() -> None:
        with torch._C.DisableTorchFunction():
            step()

    return run


def timed(steps: int, *fns: Callable[[], None]) -> list[float]:
    """Median seconds per step of each function, alternating, after two warm-up rounds."""
    times: list[list[float]] = [[] for _ in fns]
    for round_ in range(steps + 2):
        for fn, record in zip(fns, times):
            start = time.perf_counter()
            fn()
            if round_ >= 2:
                record.append(time.perf_counter() - start)
    return [statistics.median(record) for record in times]


def main() -> int:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    config = TrainConfig(algorithm="grpo", lr=1e-4, micro_batch_size=MICRO_BATCH, clip_eps=CLIP_EPS)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = str(build_tiny_model(tmp))
        from rollyard.training.checkpoint import read_hf_config

        items = make_items(read_hf_config(model_dir)["vocab_size"])
        tokens = sum(len(item.tokens) for item in items)
        plain_fn = unpatched(plain_step(model_dir, items, config))
        plain, megatron = timed(steps, plain_fn, megatron_step(model_dir, items, config))
    print(f"batch: {SAMPLES} samples, {tokens} tokens, micro-batch {MICRO_BATCH}, 1 thread, "
          f"median of {steps} steps")
    print(f"plain PyTorch step : {plain * 1e3:8.1f} ms  {tokens / plain:10.0f} tokens/s")
    print(f"Megatron step      : {megatron * 1e3:8.1f} ms  {tokens / megatron:10.0f} tokens/s")
    print(f"ratio Megatron / plain tokens/s: {plain / megatron:.2f} (target >= 0.6)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
