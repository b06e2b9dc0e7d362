"""Decode-step time of the embedded engine's model runner vs transformers ``generate`` on a
real model, in one process, side by side (no HTTP, no scheduler).

Where the engine's time goes on SmolLM2-135M: each side decodes ``--steps`` tokens for B
sequences of one 31-token prompt, one torch thread each (the engine's default), alternating
engine and transformers within each batch size so load from other processes hits both. The
engine side is ``ModelRunner.forward`` (fused layers, slot KV cache); the transformers side is
``generate`` with a minimum length, its prefill timed apart and subtracted. A profile of the
engine's step follows (``--profile``): the share of the linear layers says whether the step is
bound by matrix products (the same kernel both sides call) or by per-step overhead.

    .venv/bin/python benchmarks/real_decode.py [--model DIR] [--batch 1 16 64] [--profile]
"""

from __future__ import annotations

import argparse
import os
import time

import torch

DEFAULT_MODEL = os.path.expanduser("~/.cache/rollyard/models/SmolLM2-135M-Instruct")
PROMPT = [1, *range(10, 40)]


def engine_step_s(runner, batch: int, steps: int) -> float:
    """Seconds per decode step of ``batch`` rows after a prefill of ``PROMPT`` each."""
    slots = list(range(batch))
    runner.forward([PROMPT] * batch, [0] * batch, slots)
    started = time.perf_counter()
    for i in range(steps):
        runner.forward([[5]] * batch, [len(PROMPT) + i] * batch, slots)
    return (time.perf_counter() - started) / steps


def hf_step_s(model, batch: int, steps: int) -> float:
    """Seconds per decode step of ``generate`` (its prefill subtracted)."""
    ids = torch.tensor([PROMPT] * batch)

    def run(new: int) -> float:
        started = time.perf_counter()
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                           temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new,
                           min_new_tokens=new, pad_token_id=2)
        return time.perf_counter() - started

    return (run(steps + 1) - run(1)) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    from rollyard_plugins.embedded_engine.model_runner import ModelRunner
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    runner = ModelRunner(args.model, max(args.batch))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    engine_step_s(runner, 1, 2)  # warm-up
    hf_step_s(model, 1, 2)
    print(f"model {args.model}; 1 torch thread; {args.steps} decode steps; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'batch':>6} {'engine ms/step':>15} {'generate ms/step':>17} {'ratio':>6}")
    for batch in args.batch:
        engine = engine_step_s(runner, batch, args.steps)
        hf = hf_step_s(model, batch, args.steps)
        print(f"{batch:>6} {engine * 1e3:>15.1f} {hf * 1e3:>17.1f} {hf / engine:>6.2f}")
    print(f"load average {os.getloadavg()[0]:.2f} (ratio: generate time / engine time)")
    if args.profile:
        from torch.profiler import profile

        batch = args.batch[min(1, len(args.batch) - 1)]
        engine_step_s(runner, batch, 2)
        with profile() as prof:
            engine_step_s(runner, batch, args.steps)
        print(f"engine decode profile, batch {batch}:")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))


if __name__ == "__main__":
    main()
