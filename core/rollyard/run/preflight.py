"""The preflight: build the run's rollout and list its tasks before Ray, the engines and the run
folder exist, so that a bad option, a plugin raising in its constructor or in ``tasks()``, or a
rollout with no tasks fails in seconds with one line instead of after Ray has started.

A shared rollout is built here, in the driver, from a RolloutContext that is a worker's except
for the transport: the engines are not running yet, so the context carries a
:class:`PreflightTransport` whose every call raises a RolloutError saying so. An isolated
rollout is built the same way in a subprocess on its venv's Python (``python -m
rollyard.run.preflight``), the interpreter its workers will run on; its error comes back as one
line. The driver then uses the task counts instead of asking a worker again.

Light: nothing here imports the training stack (the isolated venv has the light core only).
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollyard.config import ConfigView, RunConfig
from rollyard.errors import (
    ConfigError,
    PluginError,
    RolloutError,
    RollyardError,
    describe_error,
    one_line,
)
from rollyard.interfaces import RolloutContext, Transport
from rollyard.model_facts import model_max_tokens
from rollyard.run.rollout_workers import RolloutSpec, load_run, run_sampling


@dataclass(frozen=True)
class TaskCounts:
    """How many tasks each split the run uses holds; ``eval`` is None when the run does not
    evaluate (no ``--eval-interval``)."""

    train: int
    eval: int | None = None


class PreflightTransport(Transport):
    """The transport of a rollout built by the preflight: no engine runs yet, so a rollout
    that sends a request while it is built or lists its tasks learns why it cannot."""

    name = "preflight"

    def __init__(self) -> None:
        super().__init__([])

    def _unavailable(self, method: str) -> RolloutError:
        return RolloutError(
            f"transport.{method}() was called while the rollout was being built or listing "
            "its tasks, before any engine runs; send requests from run_group")

    async def generate(self, request: Any) -> Any:
        raise self._unavailable("generate")

    async def generate_batch(self, requests: Sequence[Any], *,
                             return_exceptions: bool = False) -> list[Any]:
        raise self._unavailable("generate_batch")

    async def health(self) -> dict[str, bool]:
        raise self._unavailable("health")

    async def weight_versions(self) -> dict[str, int]:
        raise self._unavailable("weight_versions")

    async def update_weights(self, model_dir: str, weight_version: int) -> None:
        raise self._unavailable("update_weights")


def count_tasks(rollout_cls: type, options: Any, config: RunConfig, model_dir: str | Path,
                splits: Sequence[str]) -> TaskCounts:
    """Build ``rollout_cls`` as rollout worker 0 would (the model's tokenizer, the run's
    sampling, rng and context length) and count the tasks of each of ``splits``. A
    PluginError, one line naming the rollout, when building it or listing a split raises."""
    from transformers import AutoTokenizer

    name = getattr(rollout_cls, "name", "") or rollout_cls.__qualname__
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    except Exception as exc:
        raise ConfigError(f"--model {str(model_dir)!r}: its tokenizer does not load: "
                          f"{describe_error(exc)}") from exc
    context = RolloutContext(
        config=ConfigView(config), tokenizer=tokenizer,
        transport=PreflightTransport(), options=options,
        rng=random.Random(f"{config.seed}-0"), sampling=run_sampling(config),
        context_length=model_max_tokens(model_dir), model_dir=str(model_dir))
    try:
        rollout = rollout_cls(context)
    except Exception as exc:
        raise PluginError(f"rollout {name!r} failed to build: {describe_error(exc)}") from exc
    counts = {}
    for split in splits:
        try:
            counts[split] = len(list(rollout.tasks(split)))
        except Exception as exc:
            raise PluginError(f"rollout {name!r}: tasks({split!r}) failed: "
                              f"{describe_error(exc)}") from exc
    return counts_of(counts)


def run_splits(config: RunConfig) -> list[str]:
    """The splits a run uses: ``train``, and ``eval`` when ``--eval-interval`` asks for it."""
    return ["train", "eval"] if config.eval_interval else ["train"]


def counts_of(found: dict[str, int]) -> TaskCounts:
    """The counts of ``{split: count}`` (``eval`` None when absent)."""
    return TaskCounts(train=found["train"], eval=found.get("eval"))


def count_tasks_isolated(python: str, spec: RolloutSpec, splits: Sequence[str]) -> TaskCounts:
    """:func:`count_tasks` in a subprocess on ``python`` (an isolated venv's interpreter),
    with the plugins loaded from ``spec`` exactly as a rollout worker loads them."""
    with tempfile.TemporaryDirectory(prefix="rollyard-preflight-") as folder:
        request, answer = Path(folder) / "request.json", Path(folder) / "answer.json"
        request.write_text(json.dumps({"spec": spec.to_data(), "splits": list(splits)}))
        done = subprocess.run([python, "-m", "rollyard.run.preflight", str(request),
                               str(answer)], capture_output=True, text=True)
        if not answer.exists():
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise PluginError(f"the preflight of rollout {spec.config.rollout_plugin!r} "
                              f"on {python} failed before building it: {one_line(last)}")
        result = json.loads(answer.read_text())
    if "error" in result:
        raise PluginError(result["error"])
    return TaskCounts(**result["counts"])


def _main(argv: list[str]) -> int:
    """``python -m rollyard.run.preflight REQUEST ANSWER``: the isolated side of the
    preflight. Writes ``{"counts": {...}}`` or ``{"error": "one line"}`` to ANSWER."""
    request_path, answer_path = (Path(arg) for arg in argv)
    request = json.loads(request_path.read_text())
    try:
        manager, spec = load_run(request["spec"])
        config = spec.config
        rollout_cls = manager.get("rollout", config.rollout_plugin)
        options = config.options_for(rollout_cls,
                                     manager.owner("rollout", config.rollout_plugin).name)
        answer = {"counts": dataclasses.asdict(count_tasks(
            rollout_cls, options, config, spec.model_dir, request["splits"]))}
    except RollyardError as exc:
        answer = {"error": one_line(str(exc))}
    answer_path.write_text(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
