"""The core's own ``rollyard train`` options, grouped by what they control."""

from __future__ import annotations

import argparse


def _reward_weight(text: str) -> tuple[str, float]:
    name, sep, weight = text.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME or NAME=WEIGHT")
    try:
        return name, float(weight) if sep else 1.0
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: weight {weight!r} is not a number") from None


def _positive(kind: type) -> object:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
        return value
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def add_core_train_options(parser: argparse.ArgumentParser) -> None:
    run = parser.add_argument_group("run")
    run.add_argument("--config", metavar="TOML", help="read options from a run.toml; flags win")
    run.add_argument("--name", help="run name (default: <rollout>-<timestamp>)")
    run.add_argument("--runs-dir", default="runs", help="folder holding run folders")
    run.add_argument("--steps", type=_positive(int), default=150, help="training steps")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--failure-threshold", type=float, default=0.5,
                     help="stop when more than this share of a step's samples failed")
    run.add_argument("--no-progress", action="store_true", help="plain output, no progress bar")

    rollout = parser.add_argument_group("rollout")
    rollout.add_argument("--rollout-plugin", default="toy", metavar="NAME",
                         help="the environment to train on (see `rollyard plugins`)")
    rollout.add_argument("--reward", action="append", type=_reward_weight, metavar="NAME[=W]",
                         help="rewards to apply (repeatable); default: the rollout's own")
    rollout.add_argument("--groups-per-step", type=_positive(int), default=8)
    rollout.add_argument("--group-size", type=_positive(int), default=8,
                         help="samples per task (GRPO group)")
    rollout.add_argument("--max-concurrent-groups", type=_positive(int), default=8,
                         help="groups in flight per rollout worker")
    rollout.add_argument("--rollout-workers", type=_positive(int), default=1,
                         help="Ray actors running the rollout plugin")
    rollout.add_argument("--max-new-tokens", type=_positive(int), default=24)
    rollout.add_argument("--temperature", type=float, default=1.0)
    rollout.add_argument("--top-p", type=float, default=1.0)
    rollout.add_argument("--top-k", type=int, default=-1)
    rollout.add_argument("--rollout-timeout", type=_positive(float), default=300.0,
                         help="seconds one group may take before its samples are aborted")

    inference = parser.add_argument_group("inference")
    inference.add_argument("--model", metavar="DIR",
                           help="Hugging Face model folder (default: a tiny model built with "
                                "`rollyard init-model`)")
    inference.add_argument("--engine", default="embedded", metavar="NAME",
                           help="inference engine the run starts")
    inference.add_argument("--engine-url", action="append", metavar="URL",
                           help="use running engines instead of starting any (repeatable)")
    inference.add_argument("--num-engines", type=_positive(int), default=1)
    inference.add_argument("--transport", default="sglang", metavar="NAME")

    training = parser.add_argument_group("training")
    training.add_argument("--train-tp", type=_positive(int), default=1,
                          help="tensor-parallel size")
    training.add_argument("--train-dp", type=_positive(int), default=1, help="data-parallel size")
    training.add_argument("--num-cpus", type=_positive(int), default=None,
                          help="CPUs for the local Ray cluster (default: all)")
    training.add_argument("--ray-address", help="join an existing Ray cluster")
    training.add_argument("--lr", type=_positive(float), default=3e-3)
    training.add_argument("--clip-eps", type=_positive(float), default=0.2)
    training.add_argument("--kl-coef", type=float, default=0.0)
    training.add_argument("--entropy-coef", type=float, default=0.0)
    training.add_argument("--micro-batch-size", type=_positive(int), default=16)
    training.add_argument("--keep-zero-variance-groups", action="store_true",
                          help="train on groups whose rewards are all equal")


def wanted_plugins(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(kind, name) of every plugin a run with these options selects."""
    wanted = [("rollout", args.rollout_plugin), ("transport", args.transport)]
    if not args.engine_url:
        wanted.append(("engine", args.engine))
    wanted += [("reward", name) for name, _ in args.reward or []]
    return wanted
