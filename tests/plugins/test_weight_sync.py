"""``--weight-sync distributed`` against the embedded engine: the run's side of the protocol
(:class:`rollyard.run.weight_push.DistributedWeightSync`) with the trainer's rank 0 played by
this process, and the faults: an engine that dies during an update, a group that cannot form.
The engine's side of each endpoint is pinned by the transport contract suite."""

from __future__ import annotations

import asyncio
import itertools
import pathlib
import shutil
import socket
import threading
import time

import pytest
from rollyard import GenerateRequest, SamplingParams, TransportError
from rollyard.run.engines import EngineFleet
from rollyard.run.weight_push import DiskWeightSync, DistributedWeightSync
from rollyard_plugins.embedded_engine.launcher import EmbeddedEngine
from rollyard_plugins.sglang_transport import SGLangTransport

PROMPT = [1, 282, 201, 398, 428, 347, 485, 2, 201, 1, 280, 201]


class InProcessTrainer:
    """A train group's weight-sync face, in this process: it "trains" by switching to the
    next model folder, broadcasts that folder's tensors as rank 0 and exports it on request."""

    def __init__(self, *model_dirs: pathlib.Path) -> None:
        self.model_dirs = list(model_dirs)
        self.current = self.model_dirs[0]
        self.groups: dict[str, tuple] = {}
        #: Set to make the next broadcast wait for it (a test kills an engine meanwhile).
        self.hold: threading.Event | None = None
        self.exports: list[str] = []

    def train(self, index: int) -> None:
        self.current = self.model_dirs[index]

    def state(self) -> dict:
        from safetensors.torch import load_file

        return load_file(str(self.current / "model.safetensors"))

    def weight_specs(self) -> list:
        from rollyard.weight_transfer import TensorSpec, dtype_name

        return [TensorSpec(name, dtype_name(t.dtype), tuple(t.shape))
                for name, t in self.state().items()]

    def weight_sync_address(self) -> tuple[str, int]:
        from rollyard_plugins.embedded_engine.process import free_port

        return "127.0.0.1", free_port()

    def weight_sync_backend(self) -> str:
        return "gloo"

    def open_weight_sync(self, address, port, world_size, name, backend, timeout_s,
                         buckets) -> None:
        from rollyard.weight_transfer import init_process_group

        pg = init_process_group(backend=backend, master_address=address, master_port=port,
                                world_size=world_size, rank=0, group_name=name,
                                timeout_s=timeout_s)
        self.groups[name] = (pg, buckets)

    def broadcast_weights(self, name: str) -> None:
        import torch.distributed as dist
        from rollyard.weight_transfer import pack

        if self.hold is not None:
            self.hold.wait(30)
            self.hold = None
        pg, buckets = self.groups[name]
        state = self.state()
        for bucket in buckets:
            dist.broadcast(pack([state[s.name] for s in bucket]), group_src=0, group=pg)

    def close_weight_sync(self, name: str) -> None:
        from rollyard.weight_transfer import destroy_process_group

        entry = self.groups.pop(name, None)
        if entry is not None:
            destroy_process_group(entry[0])

    def export_hf(self, out_dir: str) -> str:
        shutil.rmtree(out_dir, ignore_errors=True)
        shutil.copytree(self.current, out_dir)
        self.exports.append(out_dir)
        return out_dir


@pytest.fixture
def fleet(tiny_model_dir, tmp_path):
    engine = EmbeddedEngine({"log_dir": str(tmp_path / "logs"), "weight_sync_timeout": 10})
    with EngineFleet(engine, str(tiny_model_dir), 1) as fleet:
        fleet.start()
        yield fleet


async def _served_logprobs(transport, teacher_forced, model_dir) -> tuple:
    result = await transport.generate(GenerateRequest(PROMPT, SamplingParams(max_new_tokens=6,
                                                                            seed=3)))
    expected = teacher_forced(model_dir, PROMPT, result.output_ids, 1.0)
    return result, expected


def test_each_push_serves_the_trainers_weights_without_touching_the_disk(
        fleet, tiny_model_dir, other_model_dir, teacher_forced, tmp_path) -> None:
    trainer = InProcessTrainer(tiny_model_dir, other_model_dir)
    sync = DistributedWeightSync(tmp_path / "run", fleet, trainer, timeout_s=20)

    async def go() -> list:
        transport = SGLangTransport(fleet.urls)
        served = []
        try:
            for version, index in ((1, 1), (2, 0), (3, 1)):
                trainer.train(index)
                assert await sync.push(transport, version) == 0
                result, expected = await _served_logprobs(transport, teacher_forced,
                                                          trainer.current)
                served.append((result.weight_version, result.logprobs, expected,
                               await transport.weight_versions()))
        finally:
            await sync.close(transport)
            await transport.close()
        return served

    for version, (served_version, logprobs, expected, versions) in enumerate(asyncio.run(go()),
                                                                             start=1):
        assert served_version == version
        assert versions == {fleet.urls[0]: version}
        assert logprobs == pytest.approx(expected, abs=1e-4)
    assert trainer.exports == []  # nothing was written
    assert sync.current_weights_dir is None


def test_an_engine_that_dies_during_an_update_is_relaunched_with_the_weights_from_disk(
        fleet, tiny_model_dir, other_model_dir, teacher_forced, tmp_path) -> None:
    trainer = InProcessTrainer(tiny_model_dir, other_model_dir)
    sync = DistributedWeightSync(tmp_path / "run", fleet, trainer, timeout_s=10)
    url = fleet.urls[0]

    async def go() -> tuple:
        transport = SGLangTransport(fleet.urls)
        try:
            await sync.push(transport, 1)  # the group forms
            trainer.train(1)
            trainer.hold = threading.Event()
            push = asyncio.ensure_future(sync.push(transport, 2))
            await asyncio.sleep(0.5)  # the engine is waiting for the broadcast
            fleet.handles[0].process.kill()
            fleet.handles[0].process.wait()
            trainer.hold.set()
            restarted = await push
            after = await _served_logprobs(transport, teacher_forced, other_model_dir)
            trainer.train(0)
            again = await sync.push(transport, 3)  # a new group, with the new engine
            final = await _served_logprobs(transport, teacher_forced, tiny_model_dir)
            return restarted, after, again, final, await transport.weight_versions()
        finally:
            await sync.close(transport)
            await transport.close()

    started = time.monotonic()
    restarted, (after, expected), again, (final, expected_final), versions = asyncio.run(go())
    assert restarted == 1
    assert len(trainer.exports) == 1 and trainer.exports[0].endswith("step-00002")
    assert after.weight_version == 2
    assert after.logprobs == pytest.approx(expected, abs=1e-4)
    assert again == 0
    assert final.weight_version == 3 and versions == {url: 3}
    assert final.logprobs == pytest.approx(expected_final, abs=1e-4)
    assert time.monotonic() - started < 120


def test_a_group_whose_port_is_taken_fails_naming_the_engine(fleet, tiny_model_dir,
                                                              tmp_path) -> None:
    sync = DistributedWeightSync(tmp_path / "run", fleet, InProcessTrainer(tiny_model_dir),
                                 timeout_s=5)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()

        async def go() -> None:
            transport = SGLangTransport(fleet.urls)
            try:
                await sync.connect(transport, port=taken.getsockname()[1])
            finally:
                await transport.close()

        started = time.monotonic()
        with pytest.raises(TransportError, match=fleet.urls[0]) as caught:
            asyncio.run(go())
    assert "did not form" in str(caught.value)
    assert time.monotonic() - started < 30


def test_a_group_of_the_wrong_world_size_fails_naming_the_engine(fleet, tiny_model_dir,
                                                                 tmp_path) -> None:
    sync = DistributedWeightSync(tmp_path / "run", fleet, InProcessTrainer(tiny_model_dir),
                                 timeout_s=3)

    async def go() -> None:
        transport = SGLangTransport(fleet.urls)

        async def two_ranks() -> dict[str, int]:  # as if the engine were tensor-parallel 2
            return {url: 2 for url in transport.urls}

        transport.weight_group_ranks = two_ranks
        try:
            await sync.connect(transport)
        finally:
            await transport.close()

    started = time.monotonic()
    with pytest.raises(TransportError, match=fleet.urls[0]) as caught:
        asyncio.run(go())
    assert "3 ranks" in str(caught.value)
    assert time.monotonic() - started < 30


def test_disk_sync_keeps_the_last_two_exports(fleet, tiny_model_dir, other_model_dir,
                                              tmp_path) -> None:
    trainer = InProcessTrainer(tiny_model_dir, other_model_dir)
    sync = DiskWeightSync(tmp_path / "run", fleet, trainer)

    async def go() -> dict:
        transport = SGLangTransport(fleet.urls)
        try:
            for version in (1, 2, 3):
                trainer.train(version % 2)
                await sync.push(transport, version)
            return await transport.weight_versions()
        finally:
            await transport.close()

    assert asyncio.run(go()) == {fleet.urls[0]: 3}
    assert sorted(p.name for p in (tmp_path / "run" / "weights").iterdir()) == [
        "step-00002", "step-00003"]
    assert sync.current_weights_dir.endswith("step-00003")


def _scored_samples(vocab: int, step: int) -> list:
    """Two groups of four with varied rewards: something for the trainer to learn from."""
    import random

    from rollyard import Sample, SampleStatus

    rng = random.Random(step)
    out = []
    for g in range(2):
        prompt = [rng.randrange(3, vocab) for _ in range(10)]
        for i in range(4):
            response = [rng.randrange(3, vocab) for _ in range(6)]
            out.append(Sample(tokens=prompt + response, prompt_len=10, loss_mask=[1] * 6,
                              logprobs=[-6.0] * 6, reward=float(i % 2), task_id=f"t{g}",
                              group_id=f"s{step}/g{g}", status=SampleStatus.COMPLETED))
    return out


def test_a_broadcast_staged_by_the_train_step_serves_the_trained_weights(
        fleet, tiny_model_dir, ray_session, tmp_path) -> None:
    """The run's path: each train step (two updates) stages the broadcast of its last update
    on rank 0, and the push only asks the engine to receive it."""
    from rollyard import Sample
    from rollyard.training import TrainConfig, TrainGroup

    group = TrainGroup(model_dir=str(tiny_model_dir),
                       config=TrainConfig(lr=1e-2, minibatches=2))
    # one fixed sample, scored by the trainer at each version: the policy must move
    probe = Sample(tokens=[*PROMPT, 5, 6, 7, 8], prompt_len=len(PROMPT), loss_mask=[1] * 4,
                   logprobs=[0.0] * 4)
    sync = DistributedWeightSync(tmp_path / "run", fleet, group, timeout_s=20)

    async def go() -> list:
        transport = SGLangTransport(fleet.urls)
        rows = []
        try:
            for version in (1, 2, 3):
                options = sync.train_options()
                # the first push forms the group, so only later steps can stage
                assert options == ({} if version == 1 else {"then_broadcast": sync.group_name})
                metrics = await asyncio.to_thread(group.train,
                                                  _scored_samples(group.vocab_size, version),
                                                  **options)
                assert metrics["updates"] == 2
                assert await sync.push(transport, version) == 0
                result = await transport.generate(GenerateRequest(
                    PROMPT, SamplingParams(max_new_tokens=6, seed=version)))
                sample = Sample(tokens=PROMPT + result.output_ids, prompt_len=len(PROMPT),
                                loss_mask=[1] * len(result.output_ids),
                                logprobs=list(result.logprobs))
                trainer = await asyncio.to_thread(group.logprobs, [sample, probe])
                rows.append((result, trainer[0], "weight_staging_s" in metrics, trainer[1]))
        finally:
            await sync.close(transport)
            await transport.close()
        return rows

    try:
        rows = asyncio.run(go())
    finally:
        group.shutdown()
    assert [row[2] for row in rows] == [False, True, True]
    for version, (result, trainer, _, _) in enumerate(rows, start=1):
        assert result.weight_version == version
        # the engine serves exactly the trainer's policy after its last update
        assert result.logprobs == pytest.approx(trainer, abs=1e-4)
    # and each step moved the policy, so the weights of an earlier update would not match
    probes = [row[3] for row in rows]
    assert all(max(abs(a - b) for a, b in zip(before, after)) > 1e-2
               for before, after in itertools.pairwise(probes))


def test_a_staged_broadcast_no_engine_received_fails_the_next_one_by_name() -> None:
    from concurrent.futures import Future

    from rollyard.training import weight_sender

    with pytest.raises(RuntimeError, match="'g1' was never received"):
        weight_sender._finished(Future(), "g1", 0.05)
    failed: Future = Future()
    failed.set_exception(RuntimeError("broadcasting the weights over group 'g1' failed"))
    with pytest.raises(RuntimeError, match="failed"):
        weight_sender._finished(failed, "g1", 0.05)


def test_a_staged_broadcast_the_engines_never_take_ends_with_its_group(
        fleet, tiny_model_dir, ray_session, tmp_path) -> None:
    """A push that fails before the engines receive (here: no push at all) leaves rank 0's
    staged broadcast waiting; taking the group down ends it, and the next push forms a new
    group that serves the trainer's weights."""
    from rollyard import Sample
    from rollyard.training import TrainConfig, TrainGroup

    group = TrainGroup(model_dir=str(tiny_model_dir), config=TrainConfig(lr=1e-2))
    sync = DistributedWeightSync(tmp_path / "run", fleet, group, timeout_s=20)

    async def go() -> tuple:
        transport = SGLangTransport(fleet.urls)
        try:
            await asyncio.to_thread(group.train, _scored_samples(group.vocab_size, 1))
            await sync.push(transport, 1)  # the group forms
            first = sync.group_name
            options = sync.train_options()
            await asyncio.to_thread(group.train, _scored_samples(group.vocab_size, 2),
                                    **options)
            started = time.monotonic()
            await sync.disconnect(transport)  # instead of the push
            disconnect_s = time.monotonic() - started
            await asyncio.to_thread(group.train, _scored_samples(group.vocab_size, 3),
                                    **sync.train_options())
            await sync.push(transport, 3)
            result = await transport.generate(GenerateRequest(
                PROMPT, SamplingParams(max_new_tokens=6, seed=3)))
            sample = Sample(tokens=PROMPT + result.output_ids, prompt_len=len(PROMPT),
                            loss_mask=[1] * len(result.output_ids),
                            logprobs=list(result.logprobs))
            trainer = await asyncio.to_thread(group.logprobs, [sample])
            return options, first, sync.group_name, disconnect_s, result, trainer[0]
        finally:
            await sync.close(transport)
            await transport.close()

    try:
        options, first, second, disconnect_s, result, trainer = asyncio.run(go())
    finally:
        group.shutdown()
    assert options == {"then_broadcast": first} and second not in (None, first)
    assert disconnect_s < 15
    assert result.weight_version == 3
    assert result.logprobs == pytest.approx(trainer, abs=1e-4)
