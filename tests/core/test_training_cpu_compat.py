"""The CPU compatibility patches: each one applies, takes effect, and megatron-core trains.

The checks run in a fresh interpreter because the patches change process-wide state (one
TorchFunctionMode for the rest of the process) that must not leak into other tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from rollyard.training import cpu_compat

EXPECTED_TARGETS = [
    "torch.cuda.current_device", "torch.cuda.synchronize", "torch.cuda.get_rng_state",
    "torch.cuda.set_rng_state", "torch.cuda.manual_seed",
    "megatron.core.tensor_parallel.random._get_cuda_rng_state",
    "megatron.core.tensor_parallel.random._set_cuda_rng_state",
    "megatron.core.fusions.fused_softmax.get_default_causal_mask",
    "torch.cuda.current_stream", "torch.cuda.stream",
    "MoEAlltoAllTokenDispatcher.cuda_dtoh_stream",
    "megatron.core.transformer.moe.token_dispatcher.maybe_move_tensor_to_cpu",
    "torch.overrides.TorchFunctionMode(CudaToCpuMode)",
]

CHECK = textwrap.dedent("""
    import json, socket, sys, warnings
    warnings.simplefilter("ignore")
    import torch
    from rollyard.models.tiny import build_tiny_model
    from rollyard.training import cpu_compat
    from rollyard.training.batching import TrainItem
    from rollyard.algorithms import StepInfo
    from rollyard.training.config import TrainConfig
    from rollyard.training.worker import MegatronWorker

    report = {"targets": cpu_compat.apply(), "again": cpu_compat.apply()}
    from megatron.core.transformer.utils import get_default_causal_mask
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker
    report["literal_device"] = torch.empty(2, device="cuda").device.type
    report["int_device"] = torch.zeros(2, device=torch.cuda.current_device()).device.type
    report["dot_cuda"] = torch.ones(2).cuda().device.type
    report["to_cuda"] = torch.ones(2).to("cuda:0").device.type
    report["type_name"] = torch.ones(2).type()
    report["causal_mask"] = get_default_causal_mask(3).tolist()
    from megatron.core.fusions import fused_softmax
    with cpu_compat.native_compute():
        try:
            torch.empty(2, device="cuda")
            report["native_literal_device"] = "cpu"
        except (AssertionError, RuntimeError):
            report["native_literal_device"] = "refused"
        report["native_causal_mask"] = fused_softmax.get_default_causal_mask(3).tolist()
    report["literal_device_after_native"] = torch.empty(2, device="cuda").device.type
    tracker = get_cuda_rng_tracker()
    tracker.add("rollyard-test", 1234)
    with tracker.fork("rollyard-test"):
        first = torch.rand(3).tolist()
    torch.cuda.synchronize()
    report["rng_fork_differs"] = first != torch.rand(3).tolist()

    model_dir = build_tiny_model(sys.argv[1])
    worker = MegatronWorker(str(model_dir), TrainConfig(algorithm="grpo", lr=1e-3), tp=1, dp=1,
                            rank=0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    worker.setup("127.0.0.1", port)
    items = [TrainItem([5, 6, 7, 8, 9], 2, [1, 1, 1], [-6.0] * 3, 1.0),
             TrainItem([5, 6, 7, 9], 2, [1, 1], [-6.0] * 2, -1.0)]
    report["step"] = worker.train_step(items, StepInfo(sequences=2, tokens=5.0,
                                                      max_response_len=3))
    worker.shutdown()
    print("REPORT " + json.dumps(report))
""")


@pytest.mark.slow
def test_every_patch_applies_and_megatron_trains_on_cpu(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path / "model")],
                          capture_output=True, text=True, timeout=300)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    report = json.loads(lines[-1].removeprefix("REPORT "))
    assert report["targets"] == EXPECTED_TARGETS
    assert report["again"] == EXPECTED_TARGETS  # idempotent: nothing patched twice
    assert {report[k] for k in ("literal_device", "int_device", "dot_cuda", "to_cuda")} == {"cpu"}
    assert report["type_name"] == "torch.cuda.FloatTensor"
    assert report["causal_mask"] == [[False, True, True], [False, False, True],
                                     [False, False, False]]
    # the model's forward and backward run without the mode, which is back afterwards
    assert report["native_literal_device"] == "refused"
    assert report["native_causal_mask"] == report["causal_mask"]
    assert report["literal_device_after_native"] == "cpu"
    assert report["rng_fork_differs"]
    step = report["step"]
    assert step["update_skipped"] == 0.0 and step["grad_norm"] > 0
    assert step["tokens"] == 5.0 and step["loss"] == step["loss"]  # not NaN


def test_a_missing_patch_target_is_reported_by_name() -> None:
    fake = types.ModuleType("megatron.core.fake")
    with pytest.raises(RuntimeError, match=r"megatron.core.fake._get_cuda_rng_state is missing"):
        cpu_compat._patch(fake, "_get_cuda_rng_state", None)
