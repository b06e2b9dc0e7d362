"""TensorBoard event files in ``RUN_DIR/tensorboard`` (``--tensorboard``): a scalar per metric
per step, and a text table of a few samples of each step (``--tensorboard-samples``).

Written with the ``tensorboard`` package's own event writer (no torch or TensorFlow); view
with ``tensorboard --logdir runs``. A resumed run marks where it continues from, so
TensorBoard drops the steps after the checkpoint that the first process had logged.
"""

from __future__ import annotations

import importlib.util
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollyard import Sample, hookimpl
from rollyard.options import non_negative, option

#: Longest prompt or response text shown in a sample table cell.
CELL_CHARS = 300


@dataclass(frozen=True)
class TensorBoardOptions:
    """The ``--tensorboard-*`` options (the ``[tensorboard]`` table of a run.toml)."""

    enabled: bool = option(False, aliases=("--tensorboard",),
                           help="write TensorBoard event files to RUN_DIR/tensorboard "
                                "(--tensorboard for short)")
    samples: int = option(4, check=non_negative,
                          help="samples per step in the text table (0: none)")

    def __post_init__(self) -> None:
        # refused with the options, before anything starts, not when the first event is due
        if self.enabled and importlib.util.find_spec("tensorboard") is None:
            raise ValueError("--tensorboard needs the tensorboard package: pip install "
                             "'rollyard[tensorboard]' (or tensorboard)")


class TensorBoardLogger:
    """The observer: opens a writer at run start when enabled, closes it at run end."""

    name = "tensorboard"
    Options = TensorBoardOptions

    def __init__(self) -> None:
        self.writer: Any = None
        self.options = TensorBoardOptions()

    @hookimpl
    def on_run_start(self, config, run_dir, resumed_step):
        # decoded by the core with the run's config (a typed view)
        self.options = config.plugin_options.get(self.name, TensorBoardOptions())
        if not self.options.enabled:
            return
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.writer = EventFileWriter(str(Path(run_dir) / "tensorboard"))
        if resumed_step:
            from tensorboard.compat.proto.event_pb2 import Event, SessionLog

            # TensorBoard drops the events past a restart's step (what the last run logged
            # after its checkpoint)
            self.writer.add_event(Event(wall_time=time.time(), step=resumed_step + 1,
                                        session_log=SessionLog(status=SessionLog.START)))

    @hookimpl
    def on_samples(self, step, samples):
        if self.writer is None or not self.options.samples:
            return
        from tensorboard.plugins.text.summary_v2 import text_pb

        table = sample_table(samples[:self.options.samples])
        self._write(step, text_pb("samples", table).value)

    @hookimpl
    def on_step_end(self, step, metrics):
        if self.writer is None:
            return
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._write(step, [Summary.Value(tag=key, simple_value=float(value))
                           for key, value in sorted(metrics.items())
                           if isinstance(value, (int, float)) and math.isfinite(value)])
        self.writer.flush()

    @hookimpl
    def on_run_end(self, run_dir, status, error):
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def _write(self, step: int, values: list[Any]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        self.writer.add_event(Event(wall_time=time.time(), step=step,
                                    summary=Summary(value=values)))


def sample_table(samples: list[Sample]) -> str:
    """A Markdown table (TensorBoard's text plugin renders it) of samples: task, status,
    reward, prompt and response text."""
    lines = ["| task | status | reward | prompt | response |", "|---|---|---|---|---|"]
    for sample in samples:
        lines.append("| " + " | ".join([
            _cell(sample.task_id), sample.status.value, f"{sample.reward:.3f}",
            _cell(sample.metadata.get("prompt_text", "")),
            _cell(sample.metadata.get("response_text", ""))]) + " |")
    return "\n".join(lines)


def _cell(text: str) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + "…"


plugin = TensorBoardLogger()
