"""Embedded engine throughput through the ``sglang`` transport vs. transformers ``generate``.

Both sides serve the same tiny model on the same CPUs, with the same prompts, sampling
(temperature 1, no truncation) and ``max_new_tokens``; both stop a row at end-of-sequence and
only real new tokens are counted. The engine runs with its default torch threads; transformers
gets the better of 1 thread and torch's default, so the baseline is the best naive in-process
generation. The engine side is measured twice: one request per prompt, all concurrent, and
the whole batch as one request in SGLang's batch form (how a rollout sends a group). Each
concurrency level runs ``--repeats`` rounds of the three back to back; the ratios are the
median over rounds of each round's own ratio, so load from other processes that comes and
goes hits both sides of a ratio alike.
Target: ratio >= 1.0 at 64 and 128 concurrent requests (on SmolLM2: at 16 and 64).
``--model smollm2`` serves the imported SmolLM2-135M-Instruct (``rollyard models smollm2``);
``--engine-threads`` sets the engine's torch threads (default: the engine's own default, 1).
The machine's load averages are printed before and after, since other processes change every
figure.

    .venv/bin/python benchmarks/engine.py [--concurrency 1 16 64] [--max-new-tokens 64]
        [--model smollm2|DIR] [--engine-threads N]
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import random
import resource
import statistics
import tempfile
import time


def prompts(count: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[1] + [rng.randrange(3, 500) for _ in range(rng.randrange(8, 24))] + [201]
            for _ in range(count)]


async def engine_throughput(url: str, batch: list[list[int]], max_new: int,
                            one_call: bool = False) -> tuple[int, float]:
    """Tokens and seconds for ``batch``: one request per prompt, concurrently, or (with
    ``one_call``) all of them in one batch request (``generate_batch``, as a rollout sends a
    group)."""
    from rollyard import GenerateRequest, SamplingParams
    from rollyard_plugins.sglang_transport import SGLangTransport

    transport = SGLangTransport([url])
    try:
        requests = [GenerateRequest(p, SamplingParams(max_new_tokens=max_new, temperature=1.0,
                                                      seed=i)) for i, p in enumerate(batch)]
        started = time.perf_counter()
        if one_call:
            results = await transport.generate_batch(requests)
        else:
            results = await asyncio.gather(*(transport.generate(r) for r in requests))
        elapsed = time.perf_counter() - started
    finally:
        await transport.close()
    return sum(len(r.output_ids) for r in results), elapsed


def hf_throughput(model, batch: list[list[int]], max_new: int, pad_id: int,
                  eos_id: int) -> tuple[int, float]:
    import torch

    width = max(len(p) for p in batch)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
    started = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                             top_k=0, top_p=1.0, max_new_tokens=max_new, eos_token_id=eos_id,
                             pad_token_id=pad_id)
    elapsed = time.perf_counter() - started
    tokens = 0
    for row in out[:, width:].tolist():
        tokens += row.index(eos_id) + 1 if eos_id in row else len(row)
    return tokens, elapsed


def peak_rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, as ``uptime`` prints them."""
    return " ".join(pathlib.Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 128])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--model", help="model folder, or smollm2 (default: a fresh tiny qwen3)")
    parser.add_argument("--engine-threads", type=int, default=None,
                        help="the engine's torch threads (default: the engine's default)")
    args = parser.parse_args()

    import torch
    from rollyard.models.tiny import build_tiny_model
    from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine
    from transformers import AutoModelForCausalLM

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="rollyard-bench-"))
    if args.model == "smollm2":
        from rollyard.models.smollm2 import smollm2_folder

        model_dir = smollm2_folder()
    else:
        model_dir = (pathlib.Path(args.model) if args.model
                     else build_tiny_model(workdir / "model"))
    print(f"load average before: {load_average()}")
    threads = {} if args.engine_threads is None else {"threads": args.engine_threads}
    hf_threads = sorted({1, torch.get_num_threads()})
    handle = EmbeddedEngine({"max_batch_size": max(args.concurrency),
                             "log_dir": str(workdir), **threads}).launch(str(model_dir), 0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    try:
        asyncio.run(engine_throughput(handle.url, prompts(4, 0), 8))  # warm-up
        hf_throughput(model, prompts(4, 0), 8, pad, eos)
        print(f"model {model_dir}; engine: {args.engine_threads or 'default'} threads; "
              f"transformers: best of "
              f"{hf_threads} threads; max_new_tokens {args.max_new_tokens}, "
              f"best of {args.repeats}")
        print(f"{'concurrent':>10} {'requests tok/s':>15} {'one batch tok/s':>16} "
              f"{'generate tok/s':>15} {'ratio':>6} {'ratio batch':>12}")
        for count in args.concurrency:
            batch = prompts(count, count)
            rounds = []
            for _ in range(args.repeats):
                # the three back to back: a round's ratios see the same machine load
                row = []
                for one_call in (False, True):
                    tokens, seconds = asyncio.run(engine_throughput(
                        handle.url, batch, args.max_new_tokens, one_call=one_call))
                    row.append(tokens / seconds)
                best_hf = 0.0
                for threads in hf_threads:
                    torch.set_num_threads(threads)
                    tokens, seconds = hf_throughput(model, batch, args.max_new_tokens, pad, eos)
                    best_hf = max(best_hf, tokens / seconds)
                rounds.append((*row, best_hf))
            requests, one, hf = (max(r[i] for r in rounds) for i in range(3))
            ratio = statistics.median(r[0] / r[2] for r in rounds)
            ratio_batch = statistics.median(r[1] / r[2] for r in rounds)
            print(f"{count:>10} {requests:>15.0f} {one:>16.0f} {hf:>15.0f} "
                  f"{ratio:>6.2f} {ratio_batch:>12.2f}")
        print("tok/s: best round; ratio: median over rounds of engine / generate in the round")
        print(f"peak RSS: engine process {peak_rss_mib(handle.process.pid):.0f} MiB, "
              f"benchmark process (transformers side) "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
        print(f"load average after: {load_average()}")
    finally:
        handle.stop()


if __name__ == "__main__":
    main()
