"""Tokens/s of one Megatron train step versus a plain PyTorch step of the same model and batch.

Both steps compute the same PPO-clip loss on the same micro-batches and take one Adam step
with gradient clipping, in the same dtype and with the same torch threads. The plain step is
the transformers model with ``torch.optim.Adam`` (in bf16: fp32 weights under
``torch.autocast``, plain PyTorch's mixed precision); the Megatron step is one rank of the
trainer (megatron-core GPTModel, DDP, Megatron optimizer, bf16 with fp32 master weights;
gloo; the CPU patches). The two alternate step by step so that load from other processes hits
both alike; the plain step runs with torch function modes disabled, so it does not pay for the
CPU patches that only Megatron needs. The load averages before and after are printed.

Default: the tiny model, 16 samples of 128 tokens, one thread (target Megatron / plain >= 0.6).
``--model smollm2`` trains the imported SmolLM2-135M-Instruct on 8 samples of ~190 tokens
(target >= 0.8). ``--profile`` prints torch.profiler's top operators of one step of each.

    .venv/bin/python benchmarks/train_step.py [steps] [--model smollm2|DIR] [--dtype bf16]
        [--threads N] [--attention eager|sdpa] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import random
import socket
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
from rollyard.algorithms import ppo_clip
from rollyard.models.tiny import build_tiny_model
from rollyard.training.algorithm import token_logprobs
from rollyard.training.batching import TrainItem, micro_batches
from rollyard.training.config import TrainConfig
from rollyard.training.worker import MegatronWorker

#: PPO's clip range of both steps (the trainer's grpo plugin gets it through TrainConfig)
CLIP_EPS = 0.2


def ppo_clip_sum(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                 mask: torch.Tensor) -> torch.Tensor:
    """GRPO's clipped policy loss summed over the masked tokens, as the trainer's GRPO
    computes it (no KL, no entropy bonus), without an algorithm plugin."""
    out = ppo_clip(torch.exp(logprobs - old_logprobs), advantages, CLIP_EPS, CLIP_EPS)
    return (out.per_token * mask.to(logprobs.dtype)).sum()


@dataclass(frozen=True)
class Batch:
    """The shape of the benchmark's batch: ``samples`` of ``prompt`` tokens and responses of
    ``response`` tokens minus 0, 8, 16, 24 (varied, so micro-batches pad)."""

    samples: int
    prompt: int
    response: int
    micro_batch: int
    target: float


TINY = Batch(samples=16, prompt=32, response=96, micro_batch=8, target=0.6)
SMOLLM2 = Batch(samples=8, prompt=48, response=152, micro_batch=8, target=0.8)


def make_items(vocab: int, shape: Batch) -> list[TrainItem]:
    rng = random.Random(0)
    items = []
    for i in range(shape.samples):
        response = shape.response - (i % 4) * 8
        tokens = [rng.randrange(vocab) for _ in range(shape.prompt + response)]
        items.append(TrainItem(tokens, shape.prompt, [1] * response, [-6.0] * response,
                               1.0 if i % 2 else -1.0))
    return items


def plain_step(model_dir: str, items: list[TrainItem], config: TrainConfig,
               attention: str) -> Callable[[], None]:
    """One step of the same loss on the transformers model with torch.optim.Adam."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation=attention).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    total = float(sum(sum(item.loss_mask) for item in items))
    precision = (torch.autocast("cpu", dtype=torch.bfloat16) if config.dtype == "bf16"
                 else contextlib.nullcontext())

    def step() -> None:
        optimizer.zero_grad()
        for batch in micro_batches(items, config.micro_batch_size):  # a row per sample
            with precision:
                hidden = model.model(input_ids=batch.input_ids,
                                     position_ids=batch.position_ids).last_hidden_state
                # as the trainer: logits only where a response token is predicted
                logits = model.lm_head(hidden[batch.score_rows, batch.score_positions])
            logprobs, _ = token_logprobs(logits, batch.targets, config.temperature)
            loss = ppo_clip_sum(logprobs, batch.old_logprobs, batch.advantages, batch.mask)
            (loss / total).backward()
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


def timed(steps: int, warmup: int, *fns: Callable[[], None]) -> list[list[float]]:
    """Seconds of each step of each function, alternating, after ``warmup`` rounds."""
    times: list[list[float]] = [[] for _ in fns]
    for round_ in range(steps + warmup):
        for fn, record in zip(fns, times):
            start = time.perf_counter()
            fn()
            if round_ >= warmup:
                record.append(time.perf_counter() - start)
    return times


def profile(name: str, fn: Callable[[], None], rows: int = 15) -> None:
    """torch.profiler's operators of one step of ``fn``, by self CPU time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    print(f"--- profile: {name}")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, as ``uptime`` prints them."""
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steps", type=int, nargs="?", default=10,
                        help="timed steps of each side (default 10)")
    parser.add_argument("--model", help="smollm2, or a model folder (both get the SmolLM2 "
                                        "batch; default: a fresh tiny model)")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of both sides")
    parser.add_argument("--attention", choices=("eager", "sdpa"), default="eager",
                        help="transformers' attention on the plain side (eager: the faster "
                             "for the tiny model on CPU, its SDPA backward is slower there)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed rounds first")
    parser.add_argument("--profile", action="store_true",
                        help="profile one step of each side after the timed ones")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    shape = TINY if args.model is None else SMOLLM2
    config = TrainConfig(algorithm="grpo", lr=1e-4, micro_batch_size=shape.micro_batch,
                         clip_eps=CLIP_EPS, dtype=args.dtype)
    print(f"load average before: {load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "smollm2":
            from rollyard.models.smollm2 import smollm2_folder

            model_dir = str(smollm2_folder())
        else:
            model_dir = args.model or str(build_tiny_model(tmp))
        from rollyard.training.hf_folder import read_hf_config

        items = make_items(read_hf_config(model_dir)["vocab_size"], shape)
        tokens = sum(len(item.tokens) for item in items)
        plain_fn = unpatched(plain_step(model_dir, items, config, args.attention))
        megatron_fn = megatron_step(model_dir, items, config)
        torch.set_num_threads(args.threads)  # after the trainer's set-up, which sets 1
        plain, megatron = timed(args.steps, args.warmup, plain_fn, megatron_fn)
        if args.profile:
            profile("plain PyTorch", plain_fn)
            profile("Megatron", megatron_fn)
    ratios = [p / m for p, m in zip(plain, megatron)]  # each round's own ratio
    plain_s, megatron_s = statistics.median(plain), statistics.median(megatron)
    print(f"model {model_dir}; batch: {shape.samples} samples, {tokens} tokens, micro-batch "
          f"{shape.micro_batch}, {args.dtype}, {args.threads} thread(s), plain attention "
          f"{args.attention}; median of {args.steps} alternating steps")
    print(f"plain PyTorch step : {plain_s * 1e3:8.1f} ms  {tokens / plain_s:10.0f} tokens/s"
          f"  (min {min(plain) * 1e3:.1f}, max {max(plain) * 1e3:.1f})")
    print(f"Megatron step      : {megatron_s * 1e3:8.1f} ms  {tokens / megatron_s:10.0f} tokens/s"
          f"  (min {min(megatron) * 1e3:.1f}, max {max(megatron) * 1e3:.1f})")
    print(f"ratio Megatron / plain tokens/s: {plain_s / megatron_s:.2f} (medians); median of "
          f"the rounds' ratios {statistics.median(ratios):.2f} (target >= {shape.target})")
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
