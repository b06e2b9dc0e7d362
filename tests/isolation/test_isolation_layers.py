"""The two layers of an isolated venv (docs/isolation.md): the packages in a shared layer whose
name leaves out the folders installed from this machine, so a second checkout reuses them; and
a build that works offline from uv's cache and a local folder of wheels (``UV_OFFLINE``,
``UV_FIND_LINKS``), with a requirement nothing but that folder has."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

PROBE = "rollyard_offline_probe"


def test_a_second_checkout_shares_the_package_layer() -> None:
    from rollyard.isolation.envs import env_spec

    here = env_spec("rollyard")
    assert here.local and here.local[0] == "-e"  # the suite runs on an editable checkout
    elsewhere = replace(here, local=("-e", "/elsewhere/rollyard[worker]"))
    assert elsewhere.shared_key == here.shared_key and elsewhere.shared_path == here.shared_path
    assert elsewhere.key != here.key
    assert not any(Path(s.split("[")[0]).is_dir() for s in here.sources)  # no folder in it
    changed = replace(here, sources=(*here.sources, "extra==1"))
    assert changed.shared_key != here.shared_key


def write_probe_wheel(folder: Path) -> Path:
    """A wheel of ``rollyard-offline-probe 1.0`` (one module), found nowhere but ``folder``."""
    files = {f"{PROBE}/__init__.py": b"MARK = 'offline-probe'\n",
             f"{PROBE}-1.0.dist-info/METADATA":
                 b"Metadata-Version: 2.1\nName: rollyard-offline-probe\nVersion: 1.0\n",
             f"{PROBE}-1.0.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: rollyard-tests\nRoot-Is-Purelib: true\n"
                 b"Tag: py3-none-any\n"}
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{PROBE}-1.0.dist-info/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{PROBE}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr(f"{PROBE}-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


@pytest.mark.slow
def test_an_offline_build_uses_uvs_cache_and_a_local_folder_of_wheels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rollyard import IsolatedEnvironment
    from rollyard.isolation.envs import ensure_env, env_spec

    wheels = tmp_path / "wheels"
    write_probe_wheel(wheels)
    monkeypatch.setenv("UV_FIND_LINKS", str(wheels))
    spec = env_spec("rollyard", IsolatedEnvironment(
        "offline", ("rollyard-offline-probe==1.0",), "a test of offline builds"))
    # one build online fills uv's cache with exactly this resolution (the machine's cache may
    # list newer releases it never downloaded); the offline build then starts from nothing
    monkeypatch.setenv("ROLLYARD_ENVS_DIR", str(tmp_path / "online"))
    ensure_env(spec, lambda notice: None)
    monkeypatch.setenv("ROLLYARD_ENVS_DIR", str(tmp_path / "envs"))
    monkeypatch.setenv("UV_OFFLINE", "1")
    notices: list[str] = []
    path = ensure_env(spec, notices.append)
    assert str(path).startswith(str(tmp_path / "envs"))
    assert notices == [f"building the isolated environment of 'offline' in {path} (once)"]
    probe = subprocess.run([str(path / "bin" / "python"), "-c",
                            f"import {PROBE}, rollyard, ray; print({PROBE}.MARK)"],
                           capture_output=True, text=True)
    assert probe.stdout.split() == ["offline-probe"], probe.stderr
