"""``rollyard init-model DIR``: write a tiny model and its tokenizer (no download)."""

from __future__ import annotations

import argparse
import pathlib
from types import SimpleNamespace

from rollyard.errors import ConfigError
from rollyard.interfaces import Command
from rollyard.models.tiny import ARCHITECTURES, SIZES, build_tiny_model
from rollyard.train_stack import require_train_stack


class InitModelCommand(Command):
    """Builds a Qwen3/Llama-architecture model from a config with an in-process tokenizer."""

    name = "init-model"
    help = "write a tiny Hugging Face-format model and tokenizer to DIR (no download)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("dir", metavar="DIR", help="output folder (created; must be empty)")
        parser.add_argument("--arch", choices=ARCHITECTURES, default="qwen3",
                            help="model architecture (default: qwen3)")
        parser.add_argument("--size", choices=list(SIZES), default="tiny",
                            help="model shape (default: tiny)")
        parser.add_argument("--seed", type=int, default=0,
                            help="initialisation seed; the same seed gives the same model")
        parser.add_argument("--force", action="store_true",
                            help="write into DIR even if it is not empty")

    def run(self, args: SimpleNamespace) -> int:
        require_train_stack("init-model")
        out = pathlib.Path(args.dir)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"init-model: {out} exists and is not a folder")
        if out.is_dir() and any(out.iterdir()) and not args.force:
            raise ConfigError(f"init-model: folder {out} is not empty; pass --force to write "
                              "the model into it anyway")
        path = build_tiny_model(out, arch=args.arch, size=args.size, seed=args.seed)
        print(f"wrote {args.arch} {args.size} model (seed {args.seed}) to {path}")
        return 0
