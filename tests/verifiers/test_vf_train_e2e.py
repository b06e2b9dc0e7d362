"""The whole loop from the command line with real verifiers environments of every API
generation: ``rollyard train --rollout-plugin verifiers``, the embedded engine, Megatron on Ray
(2 data-parallel workers) and the weight sync back to the engine. Nothing comes from any hub.

One run mixes five ``[[rollout]]`` tables of the ``verifiers`` plugin: the shipped 0.4
single-turn environment, isolated (``rollout_env = "isolated"``: verifiers, its dependencies and
the bridge in the rollout workers' own venv, docs/isolation.md, the harness programs' wheels from
the core venv's offline index), and the pre-0.4 matrix of the issue — single-turn and
multi-turn tool on 0.3.1, single-turn on 0.2.0, code-golf published as a ``load_environment``
environment — which ``--rollout-env auto`` isolates each in a venv of the verifiers its API
needs, built through ``Rollout.isolated_environment`` (cached in ``isolated_envs_dir``, shared
with test_vf_legacy.py, which drives them in detail). Two steps, every environment in every
step. (The 0.4 codegolf taskset in the core's own venv runs through the embedded engine in
test_vf_codegolf.py; training it is the same loop.)"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

#: label -> (environment id, its verifiers in the venv's name, its reward keys, extra options)
ENVIRONMENTS: dict[str, tuple[str, str, set[str], str]] = {
    "arith04": ("rollyard_vf_arith", "rollyard-verifiers-", {"correct", "brief"},
                'max_new_tokens = 8\nrollout_env = "isolated"'),
    "arith031": ("rollyard_vf_legacy_arith", "verifiers-0.3.1-", {"correct", "brief"},
                 "max_new_tokens = 6"),
    "tools031": ("rollyard_vf_legacy_tools", "verifiers-0.3.1-", {"correct", "used_tool"},
                 "max_new_tokens = 6"),
    "arith020": ("rollyard_vf_v020_arith", "verifiers-0.2.0-", {"exact", "short"},
                 "max_new_tokens = 8"),
    "codegolf": ("rollyard_codegolf.verifiers_legacy", "verifiers-0.3.1-",
                 {"correct", "concise"}, "max_new_tokens = 16"),
}
GROUPS_EACH, GROUP_SIZE = 2, 3  # groups of each environment per step, samples per group


def run_toml() -> str:
    tables = []
    for label, (env_id, _, _, extra) in ENVIRONMENTS.items():
        turns = 2 if label == "tools031" else 1
        tables.append(f'[[rollout]]\nname = "verifiers"\nalias = "{label}"\n{extra}\n'
                      f'[rollout.options]\nenv = "{env_id}"\nmax_turns = {turns}\n')
    return "\n".join(tables)


@pytest.fixture(scope="module")
def mixed_run(rollyard_cli, tmp_path_factory, tiny_model_dir: Path, isolated_envs_dir: Path,
              legacy_env_site: Path) -> tuple[list[dict], list[dict], str]:
    """Two steps of ``train`` over the four environments, installed in ``legacy_env_site``
    (on PYTHONPATH): the samples, the metrics and what it printed on stderr."""
    root = tmp_path_factory.mktemp("vf-legacy")
    (root / "run.toml").write_text(run_toml())
    runs = root / "runs"
    result = rollyard_cli(
        "train", "--config", str(root / "run.toml"), "--model", str(tiny_model_dir),
        "--steps", "2", "--groups-per-step", str(GROUPS_EACH * len(ENVIRONMENTS)),
        "--group-size", str(GROUP_SIZE), "--num-cpus", "2", "--train-dp", "2",
        "--runs-dir", str(runs), "--no-progress", "--keep-zero-variance-groups",
        paths=[Path(__file__).parent / "envs", legacy_env_site],
        env={"ROLLYARD_ENVS_DIR": str(isolated_envs_dir), "ROLLYARD_VERIFIERS_INDEX": str(
            Path(sys.prefix) / "share" / "rollyard-verifiers" / "simple")},
        cwd=root, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [run] = list(runs.iterdir())

    def read(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (run / name).read_text().splitlines()]

    return read("samples.jsonl"), read("metrics.jsonl"), result.stderr


def samples_of(mixed_run, label: str) -> list[dict]:
    return [s for s in mixed_run[0] if s["env"] == label]


def test_each_environment_runs_in_the_venv_of_its_verifiers(mixed_run, isolated_envs_dir) -> None:
    placed = " ".join(mixed_run[2].split())
    pythons = re.findall(r"rollout workers of 'verifiers' run on (\S+)/bin/python", placed)
    assert all(Path(python).parent == isolated_envs_dir for python in pythons), placed
    venvs = sorted(Path(python).name.rsplit("-", 1)[0] for python in pythons)
    expected = [f"{verifiers}{env_id}" for env_id, verifiers, _, _ in ENVIRONMENTS.values()
                if verifiers.startswith("verifiers-")]
    assert venvs == sorted(["rollyard-verifiers", *expected]), placed


@pytest.mark.parametrize("label", list(ENVIRONMENTS))
def test_every_step_trains_every_environment_on_its_own_rewards(mixed_run, label) -> None:
    _, _, reward_keys, _ = ENVIRONMENTS[label]
    samples, metrics = samples_of(mixed_run, label), mixed_run[1]
    for step in (1, 2):
        batch = [s for s in samples if s["step"] == step]
        assert len(batch) >= GROUPS_EACH * GROUP_SIZE  # a segment each, more where one split
        assert len({s["group_id"] for s in batch}) == GROUPS_EACH
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
        assert m[f"env/{label}/verifiers/error_rate"] == 0.0
        assert math.isfinite(m["train/loss"])


def test_single_turn_responses_train_every_token(mixed_run) -> None:
    for label in ("arith04", "arith031", "arith020", "codegolf"):
        assert all(all(s["loss_mask"]) for s in samples_of(mixed_run, label))


def test_the_shipped_environment_samples_whole_groups_on_the_weights_before(mixed_run) -> None:
    samples = samples_of(mixed_run, "arith04")
    for step in (1, 2):
        batch = [s for s in samples if s["step"] == step]
        groups: dict[str, int] = {}
        for s in batch:
            groups[s["group_id"]] = groups.get(s["group_id"], 0) + 1
        assert sorted(groups.values()) == [GROUP_SIZE] * GROUPS_EACH
        # step 2 was generated by the weights step 1 trained and pushed to the engine
        assert {s["weight_version"] for s in batch} == {step - 1}
    assert all(set(s["rewards"]) == {"correct", "brief"} for s in samples)
    for m in mixed_run[1]:
        assert m["env/arith04/verifiers/num_turns_mean"] == 1.0
        assert math.isfinite(m["env/arith04/verifiers/reward_mean"])


def test_multi_turn_tool_episodes_keep_their_turns(mixed_run) -> None:
    by_trace: dict[str, list[dict]] = {}
    for s in samples_of(mixed_run, "tools031"):
        by_trace.setdefault(s["metadata"]["trace_id"], []).append(s)
    assert None not in by_trace
    assert len(by_trace) == 2 * GROUPS_EACH * GROUP_SIZE
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
