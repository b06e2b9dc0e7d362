"""Pre-0.4 verifiers environments trained end to end in one command: ``rollyard train
--rollout-plugin verifiers --vf-env ID`` isolates them (``--rollout-env auto``) in a venv of the
verifiers their API needs, built through ``Rollout.isolated_environment`` (cached in
``isolated_envs_dir``, shared with test_vf_legacy.py), two steps each: the matrix of the issue
(single-turn and multi-turn tool on 0.3.1, single-turn on 0.2.0, code-golf published as a
``load_environment`` environment). test_vf_legacy.py drives them in detail."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from test_vf_e2e import GROUP_SIZE, GROUPS, train

pytestmark = pytest.mark.slow


Run = Callable[..., tuple[list[dict], list[dict], str]]


@pytest.fixture
def train_legacy(rollyard_cli, tmp_path: Path, tiny_model_dir: Path, isolated_envs_dir: Path,
                 legacy_env_site: Path) -> Run:
    """``train_legacy(env_id, *flags)``: two steps of ``train`` with the test environments
    installed in ``legacy_env_site`` (on PYTHONPATH)."""
    def run(env_id: str, *extra: str) -> tuple[list[dict], list[dict], str]:
        return train(rollyard_cli, tmp_path, tiny_model_dir, env_id, 2, *extra,
                     env={"ROLLYARD_ENVS_DIR": str(isolated_envs_dir),
                          "PYTHONPATH": str(legacy_env_site)})
    return run


def check(samples: list[dict], metrics: list[dict], reward_keys: set[str], stderr: str,
          label: str) -> None:
    placed = " ".join(stderr.split())
    assert "rollout workers of 'verifiers' run on " in placed and label in placed, placed
    for step in (1, 2):
        batch = [s for s in samples if s["step"] == step]
        assert len(batch) >= GROUPS * GROUP_SIZE  # a segment each, more where one split
        assert len({s["group_id"] for s in batch}) == GROUPS
    for s in samples:
        assert s["status"] in ("completed", "truncated"), s["metadata"]
        response = len(s["tokens"]) - s["prompt_len"]
        assert response > 0 and len(s["logprobs"]) == len(s["loss_mask"]) == response
        assert s["loss_mask"][0] == 1
        assert all(math.isfinite(lp) and lp <= 0 for lp in s["logprobs"])
        assert reward_keys <= set(s["rewards"])
    assert {s["weight_version"] for s in samples if s["step"] == 2} == {1}
    assert [m["weight_version"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["env/verifiers/error_rate"] == 0.0
        assert math.isfinite(m["train/loss"])


def test_train_a_031_single_turn_environment(train_legacy: Run) -> None:
    samples, metrics, stderr = train_legacy("rollyard_vf_legacy_arith", "--max-new-tokens", "6")
    check(samples, metrics, {"correct", "brief"}, stderr, "verifiers-0.3.1-")
    assert all(all(s["loss_mask"]) for s in samples)  # one turn: every response token trains


def test_train_a_031_multi_turn_tool_environment(train_legacy: Run) -> None:
    samples, metrics, stderr = train_legacy("rollyard_vf_legacy_tools",
                                            "--max-new-tokens", "6", "--verifiers-max-turns", "2")
    check(samples, metrics, {"correct", "used_tool"}, stderr, "verifiers-0.3.1-")
    by_trace: dict[str, list[dict]] = {}
    for s in samples:
        by_trace.setdefault(s["metadata"]["trace_id"], []).append(s)
    assert None not in by_trace
    assert len(by_trace) == 2 * GROUPS * GROUP_SIZE
    for segments in by_trace.values():
        seen = [(s["metadata"], s["loss_mask"]) for s in segments]
        turns = segments[0]["metadata"]["num_turns"]
        # two model turns; one when the first reply was empty (verifiers stops the rollout on
        # its EmptyModelResponseError; the reply was sampled, so it trains like any other)
        assert turns == 2 or (turns == 1 and segments[0]["metadata"]["stop_condition"]
                              == "has_error"), seen
        # the turns in one sample with the environment's turn masked out, or (a truncated reply
        # the next prompt re-rendered differently) a sample per turn; each sample begins and
        # ends with model tokens
        assert 1 <= len(segments) <= turns, seen
        assert all(s["loss_mask"][0] == s["loss_mask"][-1] == 1 for s in segments), seen
        if len(segments) < turns:
            assert 0 in segments[0]["loss_mask"], seen


def test_train_a_020_environment(train_legacy: Run) -> None:
    """Its own requirement (verifiers==0.2.0) picks the verifiers."""
    samples, metrics, stderr = train_legacy("rollyard_vf_v020_arith", "--max-new-tokens", "8")
    check(samples, metrics, {"exact", "short"}, stderr, "verifiers-0.2.0-")


def test_train_codegolf_as_a_load_environment_environment(train_legacy: Run) -> None:
    samples, metrics, stderr = train_legacy("rollyard_codegolf.verifiers_legacy",
                                            "--max-new-tokens", "16")
    check(samples, metrics, {"correct", "concise"}, stderr, "verifiers-0.3.1-")
