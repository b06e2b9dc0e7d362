"""Evaluation on the eval split: pass@k against hand-computed values, the eval metrics of a
set of samples, which tasks and seeds an evaluation uses, and ``rollyard eval`` on a real
engine (and refusing a rollout without eval tasks before it generates anything)."""

from __future__ import annotations

import json

import pytest
from rollyard import cli
from rollyard.config import RunConfig
from rollyard.errors import ConfigError
from rollyard.run.eval_split import EvalPlan, eval_metrics, pass_at_k
from rollyard.seeding import derive_seed
from rollyard.types import Sample, SampleStatus


def test_pass_at_k_is_the_unbiased_estimator():
    # 2 of 4 samples solve: pass@1 = 2/4; pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6; pass@3 = 1
    assert pass_at_k(4, 2, 1) == pytest.approx(0.5)
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    assert pass_at_k(4, 2, 3) == 1.0
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(1, 1, 1) == 1.0
    with pytest.raises(ValueError, match="0 < k <= n"):
        pass_at_k(2, 1, 3)


def sample(task: str, reward: float, status: SampleStatus = SampleStatus.COMPLETED) -> Sample:
    if status in (SampleStatus.FAILED, SampleStatus.ABORTED):
        return Sample.lost(task, f"{task}/g", status, "broke", [1, 2])
    return Sample(tokens=[1, 2, 3, 4], prompt_len=2, loss_mask=[1, 1], logprobs=[-0.1, -0.2],
                  reward=reward, status=status, task_id=task, group_id=f"{task}/g")


def test_eval_metrics_of_a_hand_computed_example():
    # task a: 2 of 4 solve; task b: none of 4 (one failed sample counts 0 reward)
    samples = [sample("a", 1.0), sample("a", 0.5), sample("a", 1.0), sample("a", 0.0),
               sample("b", 0.2), sample("b", 0.2), sample("b", 0.0, SampleStatus.FAILED),
               sample("b", 0.6, SampleStatus.TRUNCATED)]
    solved = [True, False, True, False, False, False, False, False]
    metrics = eval_metrics(samples, solved, 4, {"score": 0.25})
    assert metrics == pytest.approx({
        "eval/reward": (1.0 + 0.5 + 1.0 + 0.0 + 0.2 + 0.2 + 0.0 + 0.6) / 8,
        "eval/tasks": 2.0, "eval/failed_rate": 1 / 8, "eval/response_len_mean": 2.0,
        "eval/pass@1": (0.5 + 0.0) / 2, "eval/pass@4": (1.0 + 0.0) / 2,
        "eval/score": 0.25})


def test_a_failed_sample_never_counts_as_solved():
    samples = [sample("a", 0.0, SampleStatus.FAILED), sample("a", 0.0)]
    assert eval_metrics(samples, [True, False], 2, {})["eval/pass@2"] == 0.0


def test_the_plan_takes_the_first_tasks_and_seeds_of_its_own():
    config = RunConfig(eval_tasks=3, eval_samples=2, seed=7)
    plan = EvalPlan.of(config, 40, "--eval-interval 1")
    assert plan.tasks == [0, 1, 2] and plan.samples == 2
    # --eval-tasks 0: the whole split
    assert EvalPlan.of(RunConfig(), 5, "rollyard eval").tasks == [0, 1, 2, 3, 4]
    seeds = plan.seeds(7, 4)
    assert len(set(seeds)) == 3 and seeds == plan.seeds(7, 4)
    # never a training group's seed (derive_seed(seed, step, draw index))
    assert not set(seeds) & {derive_seed(7, 4, i) for i in range(100)}


def test_a_rollout_without_eval_tasks_is_refused_naming_the_option():
    with pytest.raises(ConfigError, match=r"^--eval-interval 5: rollout 'toy' has no eval tasks"):
        EvalPlan.of(RunConfig(eval_interval=5), 0, "--eval-interval 5")


NO_EVAL = """
from rollyard import Rollout, hookimpl

class TrainOnly(Rollout):
    name = "train-only"
    default_rewards = {"exact-match": 1.0}

    def tasks(self, split):
        from rollyard import Task
        return [Task(id="t0", prompt="x", data={"answer": "y"})] if split == "train" else []

    async def run_group(self, task, n):
        raise AssertionError("nothing may be generated")

@hookimpl
def register_rollouts(register):
    register(TrainOnly)
"""


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for variable in ("ROLLYARD_LOAD_PLUGINS", "ROLLYARD_DISABLE_PLUGINS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")


def test_rollyard_eval_refuses_a_rollout_without_eval_tasks(clean_env, make_distribution,
                                                            tiny_model_dir, capsys):
    make_distribution("rollyard-train-only", {"ry_train_only.py": NO_EVAL},
                      {"train-only": "ry_train_only"})
    # no engine listens there: the refusal must come before anything is generated
    status = cli.main(["eval", "--model", str(tiny_model_dir), "--rollout-plugin", "train-only",
                       "--engine-url", "http://127.0.0.1:9"])
    assert status == 1
    assert ("rollyard eval: rollout 'train-only' has no eval tasks"
            in " ".join(capsys.readouterr().err.split()))


def test_rollyard_eval_evaluates_a_model_folder(clean_env, tiny_model_dir, embedded_engine,
                                                capsys):
    argv = ["eval", "--model", str(tiny_model_dir), "--engine-url", embedded_engine.url,
            "--eval-tasks", "3", "--eval-samples", "2", "--eval-temperature", "1.0",
            "--max-new-tokens", "6", "--seed", "3", "--json"]
    assert cli.main(argv) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["eval/tasks"] == 3
    assert 0 <= metrics["eval/pass@1"] <= metrics["eval/pass@2"] <= 1
    assert 0 <= metrics["eval/reward"] <= 2 and metrics["eval/response_len_mean"] > 0
    assert cli.main(argv) == 0  # seeded: the same samples again
    assert json.loads(capsys.readouterr().out)["eval/reward"] == metrics["eval/reward"]
