"""Checkpoints of a run: folders under ``RUN_DIR/checkpoints/`` that are complete or absent.

::

    checkpoints/
      step-000012/            a complete checkpoint
        checkpoint.json       manifest: the step, the driver's state, every file and its size
        trainer/              Megatron model and optimizer (dist_checkpointing), and each
                              rank's LR schedule and rng states
        hf/                   the policy as a Hugging Face folder (what the engines serve)
        rollout.pkl           each rollout worker's ``Rollout.state_dict()``
      latest                  the name of the newest complete checkpoint
      .partial-step-000016/   a save in progress, or one that a kill interrupted

A save writes everything into the ``.partial-`` folder, fsyncs every file, renames the folder
(atomic within one filesystem), fsyncs ``checkpoints/``, replaces ``latest`` the same way and
only then deletes the older checkpoints. A process killed at any moment therefore leaves the
previous checkpoint intact; :meth:`CheckpointStore.find` picks the newest folder whose manifest
and files are all there, and says in one line what it passed over.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollyard.errors import RollyardError

CHECKPOINTS = "checkpoints"
LATEST = "latest"
MANIFEST = "checkpoint.json"
PARTIAL = ".partial-"
FORMAT = 1


class CheckpointError(RollyardError):
    """A checkpoint could not be written, or a run folder holds none that can be used."""


#: The file of a checkpoint that holds each task's best sample (``--replay-best``).
BEST_SAMPLES_FILE = "best_samples.pkl"


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint folder and its manifest."""

    path: Path
    step: int
    manifest: dict[str, Any]

    @property
    def state(self) -> dict[str, Any]:
        """The driver's state: weight version, task cursor, elapsed time …"""
        return self.manifest["state"]

    @property
    def trainer_dir(self) -> Path:
        return self.path / "trainer"

    @property
    def hf_dir(self) -> Path:
        return self.path / "hf"

    @property
    def rollout_file(self) -> Path:
        return self.path / "rollout.pkl"

    @property
    def best_samples_file(self) -> Path:
        """Each task's best sample (``--replay-best``); absent in checkpoints from before it."""
        return self.path / BEST_SAMPLES_FILE


def checkpoint_name(step: int) -> str:
    return f"step-{step:06d}"


class CheckpointStore:
    """The checkpoints of one run folder."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / CHECKPOINTS

    # ------------------------------------------------------------------ saving

    def save(self, step: int, write: Callable[[Path], dict[str, Any]],
             fault: Callable[[str], None] = lambda point: None) -> Checkpoint:
        """Save the checkpoint of ``step``: ``write(folder)`` fills ``folder`` and returns the
        driver's state (plain JSON data). ``fault(point)`` is called between the stages (see
        :mod:`rollyard.run.faults`). Raises CheckpointError, with the previous checkpoint
        kept, when anything fails."""
        self.root.mkdir(parents=True, exist_ok=True)
        name = checkpoint_name(step)
        partial = self.root / f"{PARTIAL}{name}"
        final = self.root / name
        renamed = False
        try:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            state = write(partial)
            files = {str(p.relative_to(partial)): p.stat().st_size
                     for p in sorted(partial.rglob("*")) if p.is_file()}
            manifest = {"format": FORMAT, "step": step, "state": state, "files": files}
            _write_synced(partial / MANIFEST, json.dumps(manifest, indent=1) + "\n")
            _fsync_tree(partial)
            fault("save:written")
            if final.exists():  # saved again at the same step: the old one stays usable
                old = self.root / f"{name}.old"
                shutil.rmtree(old, ignore_errors=True)
                os.rename(final, old)
            os.rename(partial, final)
            renamed = True
            _fsync_dir(self.root)
            fault("save:renamed")
            _write_synced(self.root / LATEST, name + "\n")
        except Exception as exc:
            if not renamed:
                shutil.rmtree(partial, ignore_errors=True)
            previous = self.find()[0]
            if renamed:
                kept = f"{final} itself is complete"
            elif previous is not None:
                kept = f"the previous checkpoint {previous.path} is kept"
            else:
                kept = "no earlier checkpoint exists"
            raise CheckpointError(f"the checkpoint of step {step} could not be written to "
                                  f"{final}: {type(exc).__name__}: {exc}; {kept}") from exc
        self._prune(keep=final)
        return self._read(final)

    def _prune(self, keep: Path) -> None:
        """Delete every checkpoint but ``keep``, and leftovers of interrupted saves."""
        for path in self.root.iterdir():
            if path != keep and path.is_dir() and (path.name.startswith("step-")
                                                   or path.name.startswith(PARTIAL)):
                shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------------ finding

    def find(self) -> tuple[Checkpoint | None, str | None]:
        """The newest complete checkpoint (None if there is none) and, when it passed over
        something (a half-written save, a damaged folder), one line saying what."""
        if not self.root.is_dir():
            return None, None
        usable: list[Checkpoint] = []
        passed: list[str] = []
        for path in sorted(self.root.iterdir()):
            if path.name.startswith(PARTIAL) and path.is_dir():
                passed.append(f"{path.name} is half-written (the run stopped while saving it)")
            elif path.name.startswith("step-") and path.is_dir():
                try:
                    usable.append(self._read(path))
                except CheckpointError as exc:
                    passed.append(str(exc))
        chosen = max(usable, key=lambda c: c.step, default=None)
        if not passed:
            return chosen, None
        using = f"using {chosen.path.name}" if chosen else "no complete checkpoint remains"
        return chosen, f"checkpoints: {'; '.join(passed)}; {using}"

    def discard_partial(self) -> None:
        """Remove what interrupted saves left behind (before a resumed run saves again)."""
        if self.root.is_dir():
            for path in self.root.glob(f"{PARTIAL}*"):
                shutil.rmtree(path, ignore_errors=True)

    def _read(self, path: Path) -> Checkpoint:
        try:
            manifest = json.loads((path / MANIFEST).read_text())
        except FileNotFoundError:
            raise CheckpointError(f"{path.name} has no {MANIFEST}") from None
        except (OSError, json.JSONDecodeError) as exc:
            raise CheckpointError(f"{path.name}: {MANIFEST} is unreadable ({exc})") from None
        if manifest.get("format") != FORMAT:
            raise CheckpointError(f"{path.name}: checkpoint format {manifest.get('format')!r} "
                                  f"is not {FORMAT}")
        for rel, size in manifest.get("files", {}).items():
            file = path / rel
            if not file.is_file() or file.stat().st_size != size:
                raise CheckpointError(f"{path.name}: {rel} is missing or truncated")
        return Checkpoint(path, int(manifest["step"]), manifest)


# --------------------------------------------------------------------------- durable writes


def _write_synced(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically and durably (temporary file, fsync, rename,
    fsync of the folder)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        elif path.is_dir():
            _fsync_dir(path)
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
