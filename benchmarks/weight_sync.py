"""Weight sync after a train step: in-memory broadcast (``--weight-sync distributed``) versus a
Hugging Face folder on disk (``--weight-sync disk``), side by side.

Both push the same Megatron train group (one rank, gloo) to the same embedded engine through
the ``sglang`` transport, exactly as a run does after each update (the run's own
:mod:`rollyard.run.weight_push` classes): disk = export the folder +
``/update_weights_from_disk``; distributed = gather + broadcast from rank 0 while the engine
receives (``/update_weights_from_distributed``), the group formed once beforehand (its set-up
time is printed apart). As in a run, the distributed sync has rank 0 gather the new weights
and start their broadcast at the end of the train step; that staging time is added to its
push time. As in a run, a train step (16 samples) and a generation precede every
push, so the weights change and no process is idle-warm; the two modes alternate step by
step so that load from other processes hits both alike, and the median of ``--pushes`` each
is reported. Target: distributed <= 1/3 of disk for the tiny model.

    .venv/bin/python benchmarks/weight_sync.py [--sizes tiny small] [--pushes 20]
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import tempfile
import time


def samples(vocab: int, step: int) -> list:
    """Four groups of four samples with varied rewards (something to train on)."""
    import random

    from rollyard import Sample, SampleStatus

    rng = random.Random(step)
    out = []
    for g in range(4):
        for i in range(4):
            prompt = [rng.randrange(3, vocab) for _ in range(12)]
            response = [rng.randrange(3, vocab) for _ in range(8)]
            out.append(Sample(tokens=prompt + response, prompt_len=12, loss_mask=[1] * 8,
                              logprobs=[-6.0] * 8, reward=float(i % 2), task_id=f"t{g}",
                              group_id=f"s{step}/g{g}", status=SampleStatus.COMPLETED))
    return out


async def measure(model_dir: pathlib.Path, workdir: pathlib.Path, pushes: int) -> dict:
    from rollyard import GenerateRequest, SamplingParams
    from rollyard.run.engines import EngineFleet
    from rollyard.run.weight_push import DiskWeightSync, DistributedWeightSync
    from rollyard.training import TrainConfig, TrainGroup
    from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine
    from rollyard_plugins.sglang_transport import SGLangTransport

    group = TrainGroup(model_dir=str(model_dir), config=TrainConfig(algorithm="grpo"))
    try:
        with EngineFleet(EmbeddedEngine({"log_dir": str(workdir)}), str(model_dir), 1) as fleet:
            fleet.start()
            transport = SGLangTransport(fleet.urls)
            disk = DiskWeightSync(workdir / "disk", fleet, group)
            memory = DistributedWeightSync(workdir / "memory", fleet, group)
            try:
                started = time.perf_counter()
                await memory.connect(transport)
                connect_s = time.perf_counter() - started
                times: dict[str, list[float]] = {"disk": [], "distributed": []}
                vocab = group.vocab_size
                request = GenerateRequest([1, 5, 9, 201], SamplingParams(max_new_tokens=8))
                version = 0
                for _ in range(pushes + 1):
                    for name, sync in (("disk", disk), ("distributed", memory)):
                        version += 1
                        trained = await asyncio.to_thread(
                            group.train, samples(vocab, version), **sync.train_options())
                        await transport.generate_batch([request] * 8)
                        started = time.perf_counter()
                        await sync.push(transport, version)
                        # what the update spent staging the weights for the push counts
                        elapsed = time.perf_counter() - started + trained.get(
                            "weight_staging_s", 0.0)
                        if version > 2:  # the first push of each warms up
                            times[name].append(elapsed)
                versions = await transport.weight_versions()
                assert set(versions.values()) == {version}, versions
            finally:
                await memory.close(transport)
                await transport.close()
    finally:
        group.shutdown()
    size = sum(s.nbytes for bucket in memory.buckets for s in bucket)
    return {"bytes": size, "connect_s": connect_s,
            **{name: statistics.median(values) for name, values in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"])
    parser.add_argument("--pushes", type=int, default=20)
    args = parser.parse_args()

    import ray
    from rollyard.models.tiny import build_tiny_model

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="rollyard-bench-sync-"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        rows = []
        for size in args.sizes:
            model_dir = build_tiny_model(workdir / size, size=size)
            rows.append((size, asyncio.run(measure(model_dir, workdir / f"run-{size}",
                                                   args.pushes))))
    finally:
        ray.shutdown()
    print(f"median of {args.pushes} pushes each, alternating; one engine, one train rank")
    print(f"{'model':>6} {'MiB':>7} {'disk s':>9} {'distributed s':>14} {'ratio':>7} "
          f"{'group set-up s':>15}")
    for size, row in rows:
        print(f"{size:>6} {row['bytes'] / 2**20:>7.1f} {row['disk']:>9.4f} "
              f"{row['distributed']:>14.4f} {row['distributed'] / row['disk']:>7.2f} "
              f"{row['connect_s']:>15.2f}")
    print("ratio = distributed / disk (target <= 0.33 for tiny)")


if __name__ == "__main__":
    main()
