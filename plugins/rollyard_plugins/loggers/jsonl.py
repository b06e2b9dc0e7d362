"""``metrics.jsonl`` (one JSON object per step) and ``samples.jsonl`` in the run folder."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from rollyard import hookimpl


class JsonlLogger:
    def __init__(self) -> None:
        self.run_dir: Path | None = None

    @hookimpl
    def on_run_start(self, config, run_dir, resumed_step):
        self.run_dir = Path(run_dir)
        for name in ("metrics.jsonl", "samples.jsonl"):
            keep_rows_until(self.run_dir / name, resumed_step)

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


def keep_rows_until(path: Path, step: int) -> None:
    """Keep the rows of ``path`` up to ``step`` (none for 0): a resumed run writes the later
    steps again. Rows are written in step order, so the first later one ends the file; a
    last line cut short by a kill is dropped too."""
    if step <= 0 or not path.exists():
        path.write_text("")
        return
    tmp = path.with_name(path.name + ".tmp")
    with path.open() as source, tmp.open("w") as out:
        for line in source:
            try:
                row_step = json.loads(line)["step"]
            except (ValueError, KeyError, TypeError):
                break
            if row_step > step:
                break
            out.write(line if line.endswith("\n") else line + "\n")
    os.replace(tmp, path)


plugin = JsonlLogger()
