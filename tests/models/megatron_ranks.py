"""Megatron's side of the conformance suite, run as a script: ``python megatron_ranks.py
OUT TOKENS MODEL_DIR...``.

Two processes (ranks) take each model in turn at tensor parallelism 2 and then rank 0 alone
at 1, through the trainer's own rank class (:class:`rollyard.training.worker.MegatronWorker`,
without Ray). Rank 0 writes ``OUT/<model>-tp<N>.pt`` (the full logits of the token rows in
the ``TOKENS`` file) and, at tensor parallelism 2, exports the model untrained to
``OUT/<model>-export``. A mixture of experts is then also run by both ranks at expert
parallelism 2 (two data-parallel ranks holding half the experts each, both fed the same
rows): ``OUT/<model>-ep2.pt`` and ``OUT/<model>-export-ep2``.
"""

from __future__ import annotations

import json
import pathlib
import socket
import sys

import torch
import torch.multiprocessing as mp
from rollyard.training.convert import MOE_MODEL_TYPES


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _logits(model_dir: str, tp: int, rank: int, port: int, tokens: torch.Tensor,
            out: pathlib.Path, ep: int = 1) -> None:
    from rollyard.training import cpu_compat
    from rollyard.training.config import TrainConfig
    from rollyard.training.worker import MegatronWorker

    worker = MegatronWorker(model_dir, TrainConfig(algorithm="grpo"), tp, ep, rank, ep)
    worker.setup("127.0.0.1", port)
    try:
        worker.model.eval()
        positions = torch.arange(tokens.shape[1])[None].expand_as(tokens)
        with torch.no_grad(), cpu_compat.native_compute():
            logits = worker.model(tokens, positions, None)
        name = pathlib.Path(model_dir).name
        if tp > 1 or ep > 1:
            worker.export_hf(str(out / (f"{name}-export" + ("-ep2" if ep > 1 else ""))))
        if rank == 0:
            torch.save(logits, out / (f"{name}-ep{ep}.pt" if ep > 1 else f"{name}-tp{tp}.pt"))
    finally:
        worker.shutdown()


def _rank(rank: int, out: pathlib.Path, tokens: torch.Tensor, model_dirs: list[str],
          ports: list[int]) -> None:
    for i, model_dir in enumerate(model_dirs):
        _logits(model_dir, 2, rank, ports[3 * i], tokens, out)
        if rank == 0:
            _logits(model_dir, 1, 0, ports[3 * i + 1], tokens, out)
        config = json.loads((pathlib.Path(model_dir) / "config.json").read_text())
        if config["model_type"] in MOE_MODEL_TYPES:
            _logits(model_dir, 1, rank, ports[3 * i + 2], tokens, out, ep=2)


def main(argv: list[str]) -> None:
    out, tokens_file, *model_dirs = argv
    tokens = torch.load(tokens_file)
    ports = [_free_port() for _ in range(3 * len(model_dirs))]
    mp.start_processes(_rank, args=(pathlib.Path(out), tokens, model_dirs, ports), nprocs=2,
                       start_method="fork")


if __name__ == "__main__":
    main(sys.argv[1:])
