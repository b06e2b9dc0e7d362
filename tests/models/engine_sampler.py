"""The embedded engine as the conformance tests drive it: in the test process, no HTTP."""

from __future__ import annotations

import pathlib
import threading

import torch
from rollyard import Sample


class EngineSampler:
    """The embedded engine's scheduler and model runner in this process (no HTTP)."""

    def __init__(self, model_dir: pathlib.Path, dtype: str = "fp32") -> None:
        from rollyard_plugins.embedded_engine.model_runner import ModelRunner
        from rollyard_plugins.embedded_engine.scheduler import Scheduler

        self.scheduler = Scheduler(lambda: ModelRunner(model_dir, 8, dtype), 8)
        self.runner = self.scheduler.start()

    def sample(self, prompts: list[list[int]], per_prompt: int, seed: int,
               temperature: float = 1.0, max_new_tokens: int = 12) -> list[Sample]:
        from rollyard_plugins.embedded_engine.sampling import SamplingOptions
        from rollyard_plugins.embedded_engine.scheduler import Sequence

        done = threading.Semaphore(0)
        options = SamplingOptions(max_new_tokens=max_new_tokens, temperature=temperature,
                                  ignore_eos=True)
        seqs = [Sequence(rid=f"{g}-{j}", prompt=prompt, options=options,
                         on_done=lambda _seq: done.release())
                for g, prompt in enumerate(prompts) for j in range(per_prompt)]
        for i, seq in enumerate(seqs):
            seq.rng.seed(seed * 1000 + i)
        self.scheduler.submit(*seqs)
        for _ in seqs:
            assert done.acquire(timeout=60), "the engine did not finish in 60 s"
        return [Sample(tokens=s.prompt + s.output, prompt_len=len(s.prompt),
                       loss_mask=[1] * len(s.output), logprobs=list(s.logprobs),
                       reward=float(i % 2), group_id=f"g{s.rid.split('-')[0]}",
                       task_id=f"t{s.rid.split('-')[0]}") for i, s in enumerate(seqs)]

    def load(self, model_dir: str) -> None:
        self.scheduler.update_weights(model_dir, "trained").result(timeout=60)

    def close(self) -> None:
        self.scheduler.stop()


def prompts(seed: int) -> list[list[int]]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 500, (n,), generator=generator).tolist() for n in (5, 9)]
