"""Models rollyard builds or imports once and keeps: ``~/.cache/rollyard/models/``
(``ROLLYARD_MODELS_CACHE`` moves it).

The tiny model a run uses when it is given no ``--model`` lives here, one folder per seed and
builder fingerprint (the versions of torch, transformers and tokenizers, which decide the
initial weights and the tokenizer, and the builder's own source): every run folder, test and
benchmark shares one build instead of paying for its own. A folder is built under a temporary
name and renamed into place, so processes that start at once never see a half-written model.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import pathlib
import shutil
import tempfile

#: the modules whose code decides what :func:`rollyard.models.tiny.build_tiny_model` writes
_BUILDER_MODULES = ("tiny.py", "tokenizer.py", "origin.py")
_BUILDER_LIBRARIES = ("torch", "transformers", "tokenizers")


def models_cache() -> pathlib.Path:
    """Where built and imported models are cached."""
    default = pathlib.Path.home() / ".cache" / "rollyard" / "models"
    return pathlib.Path(os.environ.get("ROLLYARD_MODELS_CACHE", default))


def builder_fingerprint() -> str:
    """12 hex digits that change whenever the tiny model built for a seed could change."""
    digest = hashlib.sha256()
    for name in _BUILDER_LIBRARIES:
        digest.update(f"{name}=={importlib.metadata.version(name)}\n".encode())
    here = pathlib.Path(__file__).parent
    for module in _BUILDER_MODULES:
        digest.update((here / module).read_bytes())
    return digest.hexdigest()[:12]


def cached_tiny_model(seed: int, arch: str = "qwen3", size: str = "tiny") -> pathlib.Path:
    """The tiny model of ``arch``, ``size`` and ``seed``, built on first use."""
    from rollyard.models.tiny import build_tiny_model

    target = models_cache() / f"tiny-{arch}-{size}-seed{seed}-{builder_fingerprint()}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build_tiny_model(staging, arch=arch, size=size, seed=seed)
        try:
            staging.rename(target)
        except OSError:  # another process put its build there first: the same model
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
