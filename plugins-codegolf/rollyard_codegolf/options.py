"""The plugin's options, declared once: the ``--codegolf-*`` flags, the ``[codegolf]`` table of
run.toml and the ``codegolf`` section of config.json all come from :class:`CodegolfOptions`,
which the rollout and the three rewards share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rollyard.options import at_least, build_options, option, positive

from rollyard_codegolf.sandbox import SandboxLimits

#: Flag prefix and run.toml table of :class:`CodegolfOptions`.
PREFIX = "codegolf"
_LIMITS = SandboxLimits()


@dataclass(frozen=True)
class CodegolfOptions:
    """Where the tasks come from, how replies become programs and are scored, the sandbox's
    limits and the default rewards' weights."""

    tasks: str | None = option(
        None, metavar="PATH",
        help="task file or folder of *.json task files (default: the shipped problems)")
    extract: Literal["last_block", "whole"] = option(  # parsing.ExtractMode
        "last_block", help="where the program is in a reply: the last fenced python block, "
                           "or the whole reply")
    correct: Literal["fraction", "all"] = option(
        "fraction", help="codegolf.correct: fraction of hidden tests passed, or 1 only when "
                         "all pass")
    attempts: int = option(
        1, metavar="K", check=at_least(1),
        help="programs per episode: after a failing one, the first test case it fails "
             "(input, expected and actual output) goes back to the model, up to K attempts; "
             "the rewards score the last (1: single turn)")
    workers: int = option(2, metavar="N", check=at_least(1), help="programs run in parallel")
    timeout: float = option(_LIMITS.wall_s, metavar="S", check=positive,
                            help="wall-clock seconds per test run")
    cpu: int = option(_LIMITS.cpu_s, metavar="S", check=positive,
                      help="CPU seconds per test run")
    memory_mb: int = option(_LIMITS.memory_bytes // 2**20, metavar="MB", check=positive,
                            help="address-space limit per test run")
    output_kb: int = option(_LIMITS.output_bytes // 1024, metavar="KB", check=positive,
                            help="stdout cap per test run; more is a failure")
    python: str | None = option(None, metavar="PATH",
                                help="interpreter inside the sandbox (default: this one's base)")
    unsafe_no_sandbox: bool = option(
        False, help="run programs WITHOUT bubblewrap isolation where it cannot run (rlimits "
                    "and timeouts only); never on untrusted models")
    weight_correct: float = option(1.0, metavar="W",
                                   help="weight of codegolf.correct in the default rewards")
    weight_concise: float = option(0.2, metavar="W",
                                   help="weight of codegolf.concise in the default rewards")
    weight_fast: float = option(0.0, metavar="W",
                                help="weight of codegolf.fast in the default rewards (0: "
                                     "recorded, not counted)")

    @property
    def limits(self) -> SandboxLimits:
        """The sandbox limits of one test run."""
        return SandboxLimits(wall_s=self.timeout, cpu_s=self.cpu,
                             memory_bytes=self.memory_mb * 2**20,
                             output_bytes=self.output_kb * 1024)

    @property
    def reward_weights(self) -> dict[str, float]:
        """The default rewards: ``{"codegolf.correct": 1.0, …}`` from the weight options."""
        return {"codegolf.correct": self.weight_correct,
                "codegolf.concise": self.weight_concise, "codegolf.fast": self.weight_fast}

    @classmethod
    def of(cls, options: CodegolfOptions | Mapping[str, Any] | None) -> CodegolfOptions:
        """Options from outside the core as CodegolfOptions: an instance as it is; a mapping
        of option names to values (a test's evaluator, the verifiers taskset's config) is
        decoded by the core's one decoder, checked like run.toml, and a ConfigError names the
        bad option. The rollout and rewards receive the decoded instance from the core."""
        if isinstance(options, cls):
            return options
        return build_options(cls, PREFIX, dict(options or {}))
