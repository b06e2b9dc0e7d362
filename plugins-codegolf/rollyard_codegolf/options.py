"""The plugin's options (``--codegolf-*``) and the settings built from them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollyard import ConfigError

from rollyard_codegolf.parsing import EXTRACT_MODES
from rollyard_codegolf.sandbox import SandboxLimits

CORRECT_MODES = ("fraction", "all")


@dataclass(frozen=True)
class CodegolfSettings:
    """Everything the rollout, rewards and commands need to run and score programs."""

    tasks_path: str | None = None
    extract: str = "last_block"
    correct: str = "fraction"
    workers: int = 2
    unsafe_no_sandbox: bool = False
    python: str | None = None
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    weights: tuple[tuple[str, float], ...] = ()

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> CodegolfSettings:
        """Build from ``context.options`` (the ``--codegolf-*`` values, prefix removed);
        missing or None values take the defaults. ConfigError names the bad option."""

        def get(name: str, default: Any) -> Any:
            value = options.get(name)
            return default if value is None else value

        extract, correct = get("extract", "last_block"), get("correct", "fraction")
        if extract not in EXTRACT_MODES:
            raise ConfigError(f"--codegolf-extract {extract!r}: choose one of {EXTRACT_MODES}")
        if correct not in CORRECT_MODES:
            raise ConfigError(f"--codegolf-correct {correct!r}: choose one of {CORRECT_MODES}")
        workers = int(get("workers", 2))
        if workers < 1:
            raise ConfigError(f"--codegolf-workers {workers}: must be at least 1")
        base = SandboxLimits()
        try:
            limits = SandboxLimits(
                wall_s=float(get("timeout", base.wall_s)), cpu_s=int(get("cpu", base.cpu_s)),
                memory_bytes=int(get("memory_mb", base.memory_bytes // 2**20)) * 2**20,
                output_bytes=int(get("output_kb", base.output_bytes // 1024)) * 1024)
        except ValueError as exc:
            raise ConfigError(f"codegolf sandbox limits: {exc}") from exc
        weights = tuple((f"codegolf.{name}", float(options[f"weight_{name}"]))
                        for name in ("correct", "concise", "fast")
                        if options.get(f"weight_{name}") is not None)
        return cls(tasks_path=options.get("tasks"), extract=extract, correct=correct,
                   workers=workers, unsafe_no_sandbox=bool(options.get("unsafe_no_sandbox")),
                   python=options.get("python"), limits=limits, weights=weights)


def add_options(group: Any) -> None:
    """Declare the ``--codegolf-*`` options on a plugin option group."""
    group.add_argument("--codegolf-tasks", metavar="PATH",
                       help="task file or folder of *.json task files (default: the shipped "
                            "problems)")
    group.add_argument("--codegolf-extract", choices=EXTRACT_MODES, default="last_block",
                       help="where the program is in a reply: the last fenced python block, "
                            "or the whole reply")
    group.add_argument("--codegolf-correct", choices=CORRECT_MODES, default="fraction",
                       help="codegolf.correct: fraction of hidden tests passed, or 1 only "
                            "when all pass")
    group.add_argument("--codegolf-workers", type=int, default=2, metavar="N",
                       help="programs run in parallel")
    group.add_argument("--codegolf-timeout", type=float, default=SandboxLimits.wall_s,
                       metavar="S", help="wall-clock seconds per test run")
    group.add_argument("--codegolf-cpu", type=int, default=SandboxLimits.cpu_s, metavar="S",
                       help="CPU seconds per test run")
    group.add_argument("--codegolf-memory-mb", type=int,
                       default=SandboxLimits.memory_bytes // 2**20, metavar="MB",
                       help="address-space limit per test run")
    group.add_argument("--codegolf-output-kb", type=int,
                       default=SandboxLimits.output_bytes // 1024, metavar="KB",
                       help="stdout cap per test run; more is a failure")
    group.add_argument("--codegolf-python", metavar="PATH",
                       help="interpreter inside the sandbox (default: this one's base)")
    group.add_argument("--codegolf-unsafe-no-sandbox", action="store_true",
                       help="run programs WITHOUT bubblewrap isolation where it cannot run "
                            "(rlimits and timeouts only); never on untrusted models")
    for name, weight in (("correct", 1.0), ("concise", 0.2), ("fast", 0.0)):
        group.add_argument(f"--codegolf-weight-{name}", type=float, metavar="W",
                           help=f"weight of codegolf.{name} in the default rewards "
                                f"(default {weight})")
