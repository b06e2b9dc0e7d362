"""``metrics.jsonl`` (one JSON object per step) and ``samples.jsonl`` (one per sample of every
``--log-samples-every``-th step) in the run folder; docs/metrics.md says what they hold."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from rollyard import Sample, hookimpl

#: Metadata keys the core fills with decoded text (rollyard.run.collect.with_text).
TEXT_KEYS = ("prompt_text", "response_text")


def sample_row(step: int, sample: Sample) -> dict[str, Any]:
    """One samples.jsonl row: the text and outcome first, then the sample's fields.

    The fields are taken as they are: ``dataclasses.asdict``'s deep copy made a 128-sample
    step's rows cost 13 ms of driver time, against 3 ms now. :func:`json_default` turns any
    dataclass in the metadata into an object when the row is written."""
    fields = {f.name: getattr(sample, f.name) for f in dataclasses.fields(sample)}
    # the text is above, and the marks (failure, completion …) are fields: their copies under
    # the metadata keys of the same names are not repeated
    metadata = {k: v for k, v in fields.pop("metadata").items()
                if k not in TEXT_KEYS and k not in fields}
    return {"step": step, "env": sample.metadata.get("env"), "task_id": sample.task_id,
            "group_id": sample.group_id,
            "status": sample.status.value, "failure": sample.failure,
            "reward": sample.reward, "rewards": dict(sample.rewards),
            "weight_version": sample.weight_version,
            "prompt_text": sample.metadata.get("prompt_text"),
            "response_text": sample.metadata.get("response_text"),
            **{k: v for k, v in fields.items() if k != "status"}, "metadata": metadata}


def json_default(value: Any) -> Any:
    """What ``json.dumps`` writes for a value it cannot: a dataclass as its fields, anything
    else as its ``str``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


class JsonlLogger:
    def __init__(self) -> None:
        self.run_dir: Path | None = None
        self.samples_every = 1

    @hookimpl
    def on_run_start(self, config, run_dir, resumed_step):
        self.run_dir = Path(run_dir)
        self.samples_every = int(config.get("log_samples_every", 1))
        for name in ("metrics.jsonl", "samples.jsonl"):
            keep_rows_until(self.run_dir / name, resumed_step)

    @hookimpl
    def on_samples(self, step, samples):
        if self.run_dir is None or not self.samples_every or step % self.samples_every:
            return
        with (self.run_dir / "samples.jsonl").open("a") as fh:
            for sample in samples:
                fh.write(json.dumps(sample_row(step, sample), default=json_default) + "\n")

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
