"""One training rank: megatron-core GPTModel, DDP, optimizer, the policy step and the HF export.

The class is plain Python; :mod:`rollyard.training.group` runs one instance per Ray actor.
Each rank resolves the algorithm plugin by name through its own entry points.
On a machine without CUDA the ranks talk over gloo and :mod:`rollyard.training.cpu_compat`
is applied first; with CUDA they use NCCL and nothing is patched.
"""

from __future__ import annotations

import datetime
import functools
import socket
import time
import warnings
from collections import defaultdict

import torch

import rollyard.training.cpu_compat as cpu_compat
from rollyard.algorithms import StepInfo
from rollyard.errors import PluginError
from rollyard.training.algorithm import (
    LossProblem,
    load_algorithm,
    micro_batch_loss,
    token_logprobs,
)
from rollyard.training.batching import TrainItem, chunks, collate, micro_batches
from rollyard.training.config import TrainConfig
from rollyard.training.convert import ModelShape, hf_to_megatron
from rollyard.training.hf_folder import load_hf_weights, read_hf_config, write_hf_folder
from rollyard.training.model import build_gpt_model, scoring, torch_dtype
from rollyard.training.trainer_state import load_rank_state, save_rank_state
from rollyard.training.weight_sender import (
    RankZeroSender,
    backend_for,
    gather_hf_state,
    weight_specs,
)

# A rank that waits this long in a collective gives up: its peer is dead or stuck.
COLLECTIVE_TIMEOUT_S = 600


def _load_params(model: torch.nn.Module, params: dict[str, torch.Tensor], where: str) -> None:
    """Copy converted tensors into ``model``; every parameter must be matched exactly once."""
    own = dict(model.named_parameters())
    missing = sorted(set(own) - set(params))
    unexpected = sorted(set(params) - set(own))
    if missing or unexpected:
        raise RuntimeError(f"{where}: Megatron parameters missing from the conversion: "
                           f"{missing}; converted but unknown: {unexpected}")
    with torch.no_grad():
        for name, param in own.items():
            if tuple(param.shape) != tuple(params[name].shape):
                raise RuntimeError(f"{where}: {name} has shape {tuple(param.shape)} in Megatron "
                                   f"but {tuple(params[name].shape)} after conversion")
            param.copy_(params[name])


class MegatronWorker:
    """Rank ``rank`` of a ``tp * dp`` train group (tensor-parallel rank varies fastest); a
    mixture of experts' experts are spread over ``ep`` of the data-parallel ranks."""

    def __init__(self, model_dir: str, config: TrainConfig, tp: int, dp: int, rank: int,
                 ep: int = 1) -> None:
        self.model_dir = model_dir
        self.config = config
        self.tp, self.dp, self.rank, self.ep = tp, dp, rank, ep
        self.hf_config = read_hf_config(model_dir)
        self.shape = ModelShape.from_hf_config(self.hf_config)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.algorithm, self.algorithm_plugin = load_algorithm(config)

    @functools.cached_property
    def weight_sender(self) -> RankZeroSender:
        """Rank 0's weight-update groups with the engines and the broadcasts staged for them
        (made on first use: a run with ``--weight-sync disk`` never needs one)."""
        return RankZeroSender()

    @staticmethod
    def free_address() -> tuple[str, int]:
        """This node's IP and a free TCP port, for the rendezvous of rank 0."""
        import ray

        with socket.socket() as sock:
            sock.bind(("", 0))
            return ray.util.get_node_ip_address(), sock.getsockname()[1]

    def setup(self, master_addr: str, master_port: int) -> None:
        """Join the process group, build the model from the HF weights, DDP and optimizer."""
        # megatron-core warns about missing Apex/Transformer Engine and its own deprecations on
        # every import and layer; in a worker nobody can act on them.
        warnings.filterwarnings("ignore", category=UserWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        import torch.distributed as dist
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        cpu_compat.define_missing_te_gemm()
        if self.device.type == "cpu":
            cpu_compat.apply()
            torch.set_num_threads(1)
        else:
            torch.cuda.set_device(0)
        dist.init_process_group(
            "nccl" if self.device.type == "cuda" else "gloo",
            init_method=f"tcp://{master_addr}:{master_port}",
            rank=self.rank, world_size=self.tp * self.dp,
            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=self.tp,
                                                 expert_model_parallel_size=self.ep)
        torch.manual_seed(self.config.seed)
        model_parallel_cuda_manual_seed(self.config.seed)
        self.tp_rank = parallel_state.get_tensor_model_parallel_rank()
        self.dp_rank = parallel_state.get_data_parallel_rank()
        self.ep_rank = parallel_state.get_expert_model_parallel_rank()

        hf = load_hf_weights(self.model_dir)
        # the export (and weight sync) dtype: the checkpoint's own in fp32 training, bf16 (the
        # parameters' precision) in bf16 training
        self.export_dtype = (torch_dtype("bf16") if self.config.dtype == "bf16"
                             else next(iter(hf.values())).dtype)
        params = hf_to_megatron({k: v.float() for k, v in hf.items()}, self.shape,
                                self.tp_rank, self.tp, self.ep_rank, self.ep)
        self.model = self._build(params)
        self.reference = None
        if self.config.kl_coef > 0 or self.algorithm.needs_reference:
            self.reference = self._build(params).eval().requires_grad_(False)
        del hf, params
        self._build_optimizer()

    def _build(self, params: dict[str, torch.Tensor]) -> torch.nn.Module:
        model = build_gpt_model(self.hf_config, self.tp, self.config.dtype, self.ep,
                                self.config.moe_aux_loss_coeff)
        _load_params(model, params, f"model {self.model_dir} (tp rank {self.tp_rank})")
        return model.to(self.device)

    def _build_optimizer(self) -> None:
        """Megatron DDP (gradients reduced in fp32) and megatron-core's optimizer: plain Adam
        on the fp32 parameters, or, in bf16, its mixed-precision optimizer
        (``Float16OptimizerWithFloat16Params``), which keeps fp32 master copies of the bf16
        parameters, steps them on the fp32 gradients and copies them back."""
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        cfg = self.config
        self.ddp = DistributedDataParallel(
            self.model.config,
            DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                          use_distributed_optimizer=False),
            self.model)
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=cfg.lr, min_lr=cfg.min_lr,
                            weight_decay=cfg.weight_decay, adam_beta1=cfg.adam_beta1,
                            adam_beta2=cfg.adam_beta2, adam_eps=cfg.adam_eps,
                            clip_grad=cfg.grad_clip, bf16=cfg.dtype == "bf16",
                            params_dtype=torch_dtype(cfg.dtype)),
            [self.ddp])
        decay_steps = cfg.lr_decay_steps or cfg.warmup_steps + 1
        self.scheduler = OptimizerParamScheduler(
            self.optimizer, init_lr=0.0, max_lr=cfg.lr, min_lr=cfg.min_lr,
            lr_warmup_steps=cfg.warmup_steps, lr_decay_steps=decay_steps,
            lr_decay_style=cfg.lr_decay_style, start_wd=cfg.weight_decay,
            end_wd=cfg.weight_decay, wd_incr_steps=decay_steps, wd_incr_style="constant")

    def train_step(self, items: list[TrainItem], step: StepInfo | float,
                   first_update: bool = True,
                   then_broadcast: str | None = None) -> dict[str, float]:
        """One optimizer step over this rank's ``items``; returns sums and the step's scalars.

        The learning-rate schedule advances once per run step, on its ``first_update`` (a
        step split into mini-batches makes several updates at one rate).

        ``step`` gives the sizes of the whole step over all data-parallel ranks (a number is
        its trained-token count, for a single rank); the algorithm normalises the loss by
        them. Megatron DDP averages gradients over the ranks, hence the factor ``dp``. When
        the algorithm's loss is unusable on any rank, every rank raises the same PluginError
        and nothing is applied to the weights.

        ``then_broadcast`` names a weight-update group: after the update, the new weights are
        staged for its next broadcast (:meth:`RankZeroSender.stage_broadcast
        <rollyard.training.weight_sender.RankZeroSender.stage_broadcast>`), which the result's
        ``weight_staging_s`` times.
        """
        from megatron.core.distributed import finalize_model_grads

        if not isinstance(step, StepInfo):
            step = StepInfo(sequences=len(items), tokens=float(step), max_response_len=max(
                (len(item.loss_mask) for item in items), default=1))
        start = time.perf_counter()
        self.weight_sender.settle()  # a staged weight broadcast has copied the weights
        self.ddp.train()
        self.ddp.zero_grad_buffer()
        self.optimizer.zero_grad()
        with cpu_compat.native_compute():
            sums, problem = self._forward_backward(items, step)
        self._stop_if_any_rank_failed(problem)
        # Data-parallel all-reduce, plus the sum over tensor-parallel ranks of the q/k norm
        # grads (each rank only sees its own heads).
        finalize_model_grads([self.ddp])
        self.scheduler.step(1 if first_update else 0)
        updated, grad_norm, _ = self.optimizer.step()
        result = {**sums, "grad_norm": float(grad_norm if grad_norm is not None else 0.0),
                  "lr": float(self.optimizer.param_groups[0]["lr"]),
                  "update_skipped": float(not updated),
                  "step_time": time.perf_counter() - start}
        if then_broadcast is not None:
            staging = time.perf_counter()
            self.weight_sender.stage_broadcast(self, then_broadcast)
            result["weight_staging_s"] = time.perf_counter() - staging
        return result

    def _forward_backward(self, items: list[TrainItem],
                          step: StepInfo) -> tuple[dict[str, float], str | None]:
        """Accumulate the gradients of every micro-batch of ``items``; the loss terms' sums,
        and what was wrong with the algorithm's loss if a micro-batch's was unusable.

        With expert parallelism every forward and backward pass exchanges tokens with the
        other ranks of the expert-parallel group, so each rank makes as many passes as the
        busiest: the extra ones (and those after an unusable loss) repeat a micro-batch with
        a zero loss, which moves no weight."""
        cfg = self.config
        sums: dict[str, float] = defaultdict(float)
        problem = None
        batches = list(micro_batches(items, cfg.micro_batch_size, cfg.micro_batch_tokens,
                                     cfg.share_prompts))
        for index in range(self._expert_parallel_passes(len(batches))):
            batch = batches[min(index, len(batches) - 1)].to(self.device)
            with scoring(self.model, batch):
                logits = self.ddp(batch.input_ids, batch.position_ids, batch.attention_mask)
            if index >= len(batches) or problem is not None:
                (logits.float().sum() * 0.0).backward()
                continue
            logprobs, entropy = token_logprobs(logits, batch.targets, cfg.temperature)
            ref_logprobs = None
            if self.reference is not None:
                with torch.no_grad(), scoring(self.reference, batch):
                    ref_logits = self.reference(batch.input_ids, batch.position_ids,
                                                batch.attention_mask)
                    ref_logprobs, _ = token_logprobs(ref_logits, batch.targets, cfg.temperature)
            try:
                terms = micro_batch_loss(
                    self.algorithm, logprobs, batch.old_logprobs, batch.advantages, batch.mask,
                    step, entropy=entropy if cfg.entropy_coef else entropy.detach(),
                    entropy_coef=cfg.entropy_coef, ref_logprobs=ref_logprobs,
                    kl_coef=cfg.kl_coef, tis_cap=cfg.tis_cap,
                    trainer_old=batch.trainer_logprobs)
            except LossProblem as exc:
                problem = str(exc)
                if self.ep == 1:
                    break
                (logits.float().sum() * 0.0).backward()
                continue
            (terms.loss * self.dp).backward()
            sums["loss"] += float(terms.loss.detach())
            for key in ("policy_loss", "kl", "entropy", "clip_fraction", "logprob_mismatch",
                        "tokens", "tis_ratio", "tis_truncated"):
                sums[key] += getattr(terms, key)
            sums["tis_ratio_max"] = max(sums["tis_ratio_max"], terms.tis_ratio_max)
        return sums, problem

    def _expert_parallel_passes(self, count: int) -> int:
        """The most micro-batches any rank of this rank's expert-parallel group has (``count``
        without expert parallelism)."""
        if self.ep == 1:
            return count
        import torch.distributed as dist
        from megatron.core import parallel_state

        most = torch.tensor([count], device=self.device)
        dist.all_reduce(most, op=dist.ReduceOp.MAX,
                        group=parallel_state.get_expert_model_parallel_group())
        return int(most.item())

    def _stop_if_any_rank_failed(self, problem: str | None) -> None:
        """Every rank learns whether any rank's loss was unusable (one scalar all-reduce per
        step) and then every problem, so that all raise together, before the gradients are
        reduced or applied."""
        import torch.distributed as dist

        flag = torch.tensor([0.0 if problem is None else 1.0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() == 0.0:
            return
        problems: list[str | None] = [None] * (self.tp * self.dp)
        dist.all_gather_object(problems, problem)
        first = next(((rank, p) for rank, p in enumerate(problems) if p), None)
        if first is None:
            return
        self.ddp.zero_grad_buffer()
        self.optimizer.zero_grad()
        rank, text = first
        record = self.algorithm_plugin
        raise PluginError(f"algorithm {self.algorithm.name!r} (training rank {rank}): {text}; "
                          "the step was not applied to the weights",
                          distribution=record.distribution, entry_point=record.entry_point)

    @torch.no_grad()
    def logprobs(self, items: list[TrainItem]) -> list[list[float]]:
        """Current-policy logprobs of each item's response tokens (engine definition)."""
        self.ddp.eval()
        out = []
        with cpu_compat.native_compute():
            for chunk in chunks(items, self.config.micro_batch_size,
                                self.config.micro_batch_tokens):
                batch = collate(chunk, self.config.share_prompts).to(self.device)
                with scoring(self.model, batch):
                    logits = self.ddp(batch.input_ids, batch.position_ids, batch.attention_mask)
                chosen, _ = token_logprobs(logits, batch.targets, self.config.temperature)
                out += [chosen[i, :item.response_len].cpu().tolist()
                        for i, item in enumerate(chunk)]
        return out

    # In-memory weight sync (rollyard.training.weight_sender): rank 0 of the train group is
    # rank 0 of a process group with every engine.

    def weight_sync_specs(self) -> list | None:
        """What a weight broadcast sends (rank 0; every rank must call this)."""
        return weight_specs(self)

    def weight_sync_backend(self) -> str:
        return backend_for(self.device)

    def open_weight_sync(self, master_address: str, master_port: int, world_size: int,
                         group_name: str, backend: str, timeout_s: float,
                         buckets: list) -> None:
        """Host the rendezvous of a weight-update group and join it as rank 0 (rank 0 only;
        blocks until every engine joined); each broadcast will send ``buckets``."""
        self.weight_sender.open(master_address=master_address, master_port=master_port,
                                world_size=world_size, group_name=group_name, backend=backend,
                                timeout_s=timeout_s, buckets=buckets, device=self.device)

    def broadcast_weights(self, group_name: str) -> None:
        """Broadcast the current policy to the group's engines; every rank must call this."""
        self.weight_sender.send(self, group_name)

    def close_weight_sync(self, group_name: str) -> None:
        self.weight_sender.close(group_name)

    @torch.no_grad()
    def export_hf(self, out_dir: str) -> str | None:
        """Gather the tensor-parallel shards; global rank 0 writes the HF folder.

        Every rank must call this (the gather is a collective of the first data-parallel
        replica); ranks other than 0 return None.
        """
        state = gather_hf_state(self)
        if state is None:
            return None
        # copies on the CPU: safetensors refuses tensors that share storage, as views of one
        # parameter (gate and up of linear_fc1) do
        tensors = {k: v.to("cpu", self.export_dtype, copy=True).contiguous()
                   for k, v in state.items()}
        return str(write_hf_folder(out_dir, tensors, self.model_dir))

    def save_checkpoint(self, folder: str) -> None:
        """Write this rank's model, optimizer, LR schedule and rng states into ``folder``;
        every rank must call this (see :mod:`rollyard.training.trainer_state`)."""
        save_rank_state(self, folder)

    def load_checkpoint(self, folder: str) -> None:
        """Load what :meth:`save_checkpoint` wrote; every rank must call this."""
        self.weight_sender.settle()
        load_rank_state(self, folder)

    def shutdown(self) -> None:
        """Leave the process group."""
        import torch.distributed as dist
        from megatron.core import parallel_state

        parallel_state.destroy_model_parallel()
        if dist.is_initialized():
            dist.destroy_process_group()
