"""Whether the training stack (``rollyard[train]``) is installed, checked without importing it."""

from __future__ import annotations

import importlib.util

from rollyard.errors import MissingTrainStack

#: the top-level modules ``rollyard[train]`` brings and the commands that run training import
TRAIN_MODULES = ("torch", "ray", "megatron", "transformers")


def missing_train_modules() -> list[str]:
    """The modules of :data:`TRAIN_MODULES` this environment lacks."""
    return [name for name in TRAIN_MODULES if importlib.util.find_spec(name) is None]


def require_train_stack(command: str) -> None:
    """Raise :class:`~rollyard.errors.MissingTrainStack` naming ``command`` unless the
    training stack is installed."""
    if missing_train_modules():
        raise MissingTrainStack(command)
