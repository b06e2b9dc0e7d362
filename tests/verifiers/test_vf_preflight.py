"""A ``--vf-env`` that names nothing fails before Ray, the engines and the run folder, in one
``error:`` line: the id is resolved (without importing it) when the run chooses where the rollout
workers run, ahead of the preflight. A dotted id used to escape as a raw Ray traceback after Ray
had started."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("env_id", ["nosuch_package.env"])
def test_a_vf_env_naming_nothing_fails_before_ray_in_one_line(
        rollyard_cli, tiny_model_dir, tmp_path, env_id: str) -> None:
    runs = tmp_path / "runs"
    result = rollyard_cli("train", "--rollout-plugin", "verifiers", "--vf-env", env_id,
                          "--model", str(tiny_model_dir), "--runs-dir", str(runs),
                          "--no-progress", timeout=300)
    assert result.returncode == 1
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert line.startswith(f"error: verifiers environment {env_id!r}: no importable module"), line
    assert "Traceback" not in result.stderr and "\x1b[" not in result.stderr
    assert "Ray" not in result.stderr  # refused before Ray started
    assert not runs.exists()
