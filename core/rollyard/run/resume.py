"""``rollyard train --resume RUN_DIR``: the saved configuration, what flags may change in it,
and the checkpoint to continue from.

A resumed run must compute what the interrupted one would have: it keeps every option of its
``config.json`` except those in :data:`rollyard.config.RESUME_SAFE` (how long it goes on, where
it runs, what it prints). Anything else that differs — the model, the tensor/data-parallel
layout, a plugin, the algorithm, a plugin's option — is refused with a ConfigError naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rollyard.config import RESUME_SAFE, RunConfig, core_specs
from rollyard.errors import ConfigError
from rollyard.options import options_data
from rollyard.plugin_options import OptionTables
from rollyard.run.checkpoints import Checkpoint, CheckpointError, CheckpointStore

CONFIG_FILE = "config.json"


def saved_config_data(run_dir: str | Path) -> dict[str, Any]:
    """The ``config.json`` of a run folder, as data; a ConfigError when it is not a run."""
    path = Path(run_dir) / CONFIG_FILE
    if not Path(run_dir).is_dir():
        raise ConfigError(f"--resume {str(run_dir)!r}: no such folder")
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"--resume {str(run_dir)!r} is not a run folder (it has no "
                          f"{CONFIG_FILE})") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--resume {str(run_dir)!r}: {CONFIG_FILE} is unreadable: "
                          f"{exc}") from None


def safe_flags() -> str:
    return ", ".join(spec.flag for spec in core_specs() if spec.name in RESUME_SAFE)


def check_resume_changes(saved: RunConfig, wanted: RunConfig, run_dir: str | Path,
                         free_tables: frozenset[str] | set[str] = frozenset()) -> None:
    """A ConfigError naming the first option ``wanted`` changes that a resumed run may not.
    ``free_tables``: plugin tables that may change (observers': they only record)."""
    for spec in core_specs():
        before, after = getattr(saved, spec.name), getattr(wanted, spec.name)
        if spec.name not in RESUME_SAFE and before != after:
            _refuse(run_dir, spec.flag, before, after)
    for table, values in saved.plugin_options.items():
        if table in free_tables:
            continue
        before_values = options_data(values)
        after = wanted.plugin_options.get(table)
        after_values = options_data(after) if after is not None else {}
        for key, before in before_values.items():
            after = after_values.get(key, before)
            if after != before:
                _refuse(run_dir, f"--{table}-{key.replace('_', '-')}", before, after)


def _refuse(run_dir: str | Path, flag: str, before: Any, after: Any) -> None:
    raise ConfigError(f"--resume {str(run_dir)!r}: {flag} differs from the run's ({before!r} "
                      f"there, {after!r} now); a resumed run keeps its model, layout, plugins, "
                      f"algorithm and their options; only {safe_flags()} may change")



def resumed_config(run_dir: str | Path, tables: OptionTables, wanted: RunConfig) -> RunConfig:
    """``wanted`` (the saved config with the given flags applied), checked against the saved
    one."""
    saved = RunConfig.from_data(saved_config_data(run_dir), tables,
                                str(Path(run_dir) / CONFIG_FILE))
    check_resume_changes(saved, wanted, run_dir, tables.observer_tables())
    return wanted


def find_checkpoint(run_dir: str | Path, steps: int) -> tuple[Checkpoint, str | None]:
    """The checkpoint a resumed run continues from, and a line about what was passed over.
    CheckpointError when there is none; ConfigError when it already reached ``steps``."""
    checkpoint, note = CheckpointStore(run_dir).find()
    if checkpoint is None:
        detail = f" ({note})" if note else ""
        raise CheckpointError(f"--resume {str(run_dir)!r}: no complete checkpoint in "
                              f"{Path(run_dir) / 'checkpoints'}{detail}; the run stopped before "
                              "it saved one")
    if checkpoint.step >= steps:
        raise ConfigError(f"--resume {str(run_dir)!r}: the checkpoint is at step "
                          f"{checkpoint.step} and --steps is {steps}; pass a larger --steps to "
                          "train on")
    return checkpoint, note


def check_checkpoint_model(checkpoint: Checkpoint, model_dir: str | Path) -> None:
    """A ConfigError when the model folder's architecture is not the checkpoint's."""
    saved = json.loads((checkpoint.hf_dir / "config.json").read_text())
    current = json.loads((Path(model_dir) / "config.json").read_text())
    ignore = {"transformers_version", "_name_or_path", "torch_dtype", "dtype"}
    for key in sorted(set(saved) | set(current)):
        if key not in ignore and saved.get(key) != current.get(key):
            raise ConfigError(f"--resume: the model folder {str(model_dir)!r} is not the model "
                              f"of the checkpoint {checkpoint.path}: config.json field {key!r} "
                              f"is {current.get(key)!r} there but {saved.get(key)!r} in the "
                              "checkpoint")
