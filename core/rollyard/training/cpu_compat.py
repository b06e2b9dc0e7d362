"""Run megatron-core on machines without CUDA.

megatron-core assumes a GPU in a few dozen places: it allocates buffers with
``device=torch.cuda.current_device()`` or ``device="cuda"``, moves tensors with ``.cuda()``,
keeps the tensor-parallel RNG states with ``torch.cuda.get_rng_state``, compares
``param.type()`` with ``"torch.cuda.FloatTensor"`` and calls ``torch.cuda.synchronize()``.
:func:`apply` makes every one of these work on the CPU:

* ``torch.cuda.current_device`` returns the CPU device (not 0, which names a CUDA device
  outside the mode), ``synchronize`` does nothing, and the CUDA RNG functions
  (``get_rng_state``, ``set_rng_state``, ``manual_seed``) use the CPU generator;
* megatron's private ``_get_cuda_rng_state`` / ``_set_cuda_rng_state`` use the CPU generator;
* one :class:`torch.overrides.TorchFunctionMode`, entered for the rest of the process, maps a
  CUDA device argument (``"cuda"``, ``"cuda:N"``, an int) to the CPU, makes ``Tensor.cuda()``
  a no-op and reports CPU float tensors under their ``torch.cuda.*`` type names;
* the all-to-all token dispatcher of the mixture-of-experts layers moves its token counts
  to the host on a side CUDA stream: it gets :class:`HostStream`, a stream that is the
  current one (so nothing waits on another) and whose events are already complete, and
  ``torch.cuda.stream`` / ``current_stream`` accept it; the split sizes it moves become
  numpy arrays, as they do from a GPU (``all_to_all_single`` does not take tensors);
* the causal mask of megatron's softmax is built on the CPU, so that the model's forward and
  backward, the bulk of a step's torch calls, can run with the mode suspended
  (:func:`native_compute`): the mode sees every torch call in Python, which costs a few
  percent of a small model's step.

:func:`apply` does nothing when CUDA is available and is idempotent. It raises
``RuntimeError`` naming the patch when a target it expects is missing, so an upgrade of
megatron-core that moves a target fails loudly instead of silently running unpatched.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode, _pop_mode_temporarily

_CUDA_TYPE_NAMES = {
    "torch.FloatTensor": "torch.cuda.FloatTensor",
    "torch.HalfTensor": "torch.cuda.HalfTensor",
    "torch.BFloat16Tensor": "torch.cuda.BFloat16Tensor",
}

_CPU = torch.device("cpu")
_mode: TorchFunctionMode | None = None
_applied: list[str] = []


def _to_cpu(device: Any) -> Any:
    """The CPU in place of any CUDA device spelling; other devices unchanged."""
    if isinstance(device, int) and not isinstance(device, bool):
        return "cpu"
    if isinstance(device, str) and device.startswith("cuda"):
        return "cpu"
    if isinstance(device, torch.device) and device.type == "cuda":
        return "cpu"
    return device


class CudaToCpuMode(TorchFunctionMode):
    """Redirects megatron-core's literal CUDA device arguments to the CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.type and len(args) == 1 and not kwargs:
            name = func(*args)
            return _CUDA_TYPE_NAMES.get(name, name)
        if "device" in kwargs:
            kwargs["device"] = _to_cpu(kwargs["device"])
        if func is torch.Tensor.to and len(args) > 1:
            args = (args[0], _to_cpu(args[1]), *args[2:])
        return func(*args, **kwargs)


def _cpu_get_rng_state(*_args: Any, **_kwargs: Any) -> torch.Tensor:
    return torch.get_rng_state()


def _cpu_set_rng_state(new_state: torch.Tensor, *_args: Any, **_kwargs: Any) -> None:
    torch.set_rng_state(new_state)


def _cpu_manual_seed(seed: int) -> None:
    torch.manual_seed(seed)


class HostStream:
    """What the MoE token dispatcher takes for a CUDA stream on the CPU: work on it is
    done when issued, so waiting and synchronising do nothing."""

    def wait_stream(self, _stream: Any) -> None:
        pass

    def record_event(self) -> HostStream:
        return self

    def synchronize(self) -> None:
        pass


_HOST_STREAM = HostStream()


def _host_copy(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
    """megatron's ``maybe_move_tensor_to_cpu`` for tensors already on the CPU: what the
    device-to-host copy would give (a numpy array when asked for one)."""
    if as_numpy and isinstance(tensor, torch.Tensor):
        return tensor.numpy()
    return tensor


@functools.lru_cache(maxsize=32)
def _cpu_causal_mask(sq: int) -> torch.Tensor:
    """megatron's default causal mask (True above the diagonal: masked), on the CPU."""
    return torch.triu(torch.ones(sq, sq, dtype=torch.bool), diagonal=1)


@contextlib.contextmanager
def native_compute() -> Iterator[None]:
    """Run the body without the CUDA-to-CPU mode (a no-op when it is not the active mode).

    For the model's forward, the loss and the backward pass: megatron-core code that builds
    tensors on a literal CUDA device (the optimizer, grad clipping, set-up) must stay outside.
    """
    if _mode is None or _get_current_function_mode() is not _mode:
        yield
        return
    with _pop_mode_temporarily():
        yield


def _patch(owner: Any, name: str, value: Any) -> None:
    if not hasattr(owner, name):
        raise RuntimeError(
            f"rollyard.training.cpu_compat: patch target {owner.__name__}.{name} is missing; "
            "this megatron-core/torch version needs an updated CPU compatibility module")
    setattr(owner, name, value)
    _applied.append(f"{owner.__name__}.{name}")


def define_missing_te_gemm() -> None:
    """megatron-core 0.16's MoE router reads ``moe_utils.te_general_gemm``, which is only
    defined when Transformer Engine imports: define it as absent (its own fallback then runs).
    Needed with or without CUDA; does nothing where the name exists."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def apply() -> list[str]:
    """Patch megatron-core for CPU-only use; return the patched targets (empty with CUDA)."""
    global _mode
    if torch.cuda.is_available() or _mode is not None:
        return list(_applied)
    from megatron.core.fusions import fused_softmax
    from megatron.core.tensor_parallel import random as mcore_random
    from megatron.core.transformer.moe import token_dispatcher
    from megatron.core.transformer.moe.token_dispatcher import MoEAlltoAllTokenDispatcher

    _patch(torch.cuda, "current_device", lambda: _CPU)
    _patch(torch.cuda, "synchronize", lambda *_a, **_k: None)
    _patch(torch.cuda, "get_rng_state", _cpu_get_rng_state)
    _patch(torch.cuda, "set_rng_state", _cpu_set_rng_state)
    _patch(torch.cuda, "manual_seed", _cpu_manual_seed)
    _patch(mcore_random, "_get_cuda_rng_state", _cpu_get_rng_state)
    _patch(mcore_random, "_set_cuda_rng_state", _cpu_set_rng_state)
    _patch(fused_softmax, "get_default_causal_mask", _cpu_causal_mask)
    _patch(torch.cuda, "current_stream", lambda *_a, **_k: _HOST_STREAM)
    _patch(torch.cuda, "stream", lambda *_a, **_k: contextlib.nullcontext())
    _patch(MoEAlltoAllTokenDispatcher, "cuda_dtoh_stream", _HOST_STREAM)
    _patch(token_dispatcher, "maybe_move_tensor_to_cpu", _host_copy)
    _mode = CudaToCpuMode()
    _mode.__enter__()
    _applied.append("torch.overrides.TorchFunctionMode(CudaToCpuMode)")
    return list(_applied)
