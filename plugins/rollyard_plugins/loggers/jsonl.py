"""``metrics.jsonl`` (one JSON object per step) and ``samples.jsonl`` in the run folder."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rollyard import hookimpl


class JsonlLogger:
    def __init__(self) -> None:
        self.run_dir: Path | None = None

    @hookimpl
    def on_run_start(self, config, run_dir):
        self.run_dir = Path(run_dir)
        (self.run_dir / "metrics.jsonl").write_text("")
        (self.run_dir / "samples.jsonl").write_text("")

    @hookimpl
    def on_samples(self, step, samples):
        if self.run_dir is None:
            return
        with (self.run_dir / "samples.jsonl").open("a") as fh:
            for sample in samples:
                row = asdict(sample)
                row["status"] = sample.status.value
                row["step"] = step
                fh.write(json.dumps(row, default=str) + "\n")

    @hookimpl
    def on_step_end(self, step, metrics):
        if self.run_dir is None:
            return
        with (self.run_dir / "metrics.jsonl").open("a") as fh:
            fh.write(json.dumps({"step": step, **metrics}) + "\n")


plugin = JsonlLogger()
