"""codegolf.correct / concise / fast on real sandboxed runs, alone and through a RewardSet."""

import asyncio

import pytest
from rollyard import RewardContext, Sample, SampleStatus
from rollyard.rewards import RewardSet
from rollyard_codegolf.rewards import ConciseReward, CorrectReward, FastReward

ADD_TWO = {
    "reference": "print(sum(map(int,input().split())))",
    "shorter": "print(eval(input().replace(*' +')))",
    "longer": "a,b=map(int,input().split())\nprint(a+b)\n# a comment that makes it long",
    "slow": "import time\ntime.sleep(0.4)\nprint(sum(map(int,input().split())))",
    "partial": "a,b=map(int,input().split())\nprint(a+b if a<100 else 0)",
    "wrong": "print(5)",
}


def reply(code: str) -> str:
    return f"Here is my answer:\n```python\n{code}\n```"


def sample(completion: str) -> Sample:
    return Sample(tokens=[1, 2, 3], prompt_len=2, loss_mask=[1], logprobs=[-0.5],
                  task_id="add-two", metadata={"completion": completion})


def score(reward_cls, completions, task, **options):
    samples = [sample(c) for c in completions]
    reward = reward_cls(RewardContext(tokenizer=None, options={"timeout": 2.0, **options}))
    return asyncio.run(reward.score_group(samples, task)), samples


def test_correct_is_the_fraction_of_hidden_tests_or_all_or_nothing(tasks):
    task = tasks["add-two"].to_task()
    completions = [reply(ADD_TWO[k]) for k in ("reference", "partial", "wrong")] + ["no idea"]
    scores, samples = score(CorrectReward, completions, task)
    assert scores == [1.0, pytest.approx(2 / 3), 0.0, 0.0]
    reasons = [s.metadata["codegolf"]["reason"] for s in samples]
    assert reasons == [None, "wrong_answer", "wrong_answer", "no_code"]
    assert samples[0].metadata["codegolf"]["program"] == ADD_TWO["reference"]
    strict, _ = score(CorrectReward, completions, task, correct="all")
    assert strict == [1.0, 0.0, 0.0, 0.0]


def test_concise_rewards_short_passing_programs(tasks):
    task = tasks["add-two"].to_task()
    completions = [reply(ADD_TWO[k]) for k in ("reference", "shorter", "longer", "wrong")]
    scores, samples = score(ConciseReward, completions, task)
    reference, shorter, longer, wrong = scores
    assert shorter > reference > longer > 0.0 == wrong
    assert shorter == 1.0  # at least as short as the reference, and the group's shortest
    assert samples[3].metadata["codegolf"]["reason"] == "wrong_answer"


def test_fast_is_group_relative_among_passing_programs(tasks):
    task = tasks["add-two"].to_task()
    completions = [reply(ADD_TWO[k]) for k in ("reference", "slow", "wrong")]
    scores, _ = score(FastReward, completions, task)
    assert scores == [1.0, 0.0, 0.0]
    alone, _ = score(FastReward, [reply(ADD_TWO["slow"])], task)
    assert alone == [1.0]


def test_reward_set_records_components_and_runs_each_program_once(tasks):
    task = tasks["add-two"].to_task()
    samples = [sample(reply(ADD_TWO["shorter"])), sample("```python\nprint(\n```")]
    context = RewardContext(tokenizer=None, options={"timeout": 2.0})
    rewards = RewardSet({"codegolf.correct": CorrectReward(context),
                         "codegolf.concise": ConciseReward(context),
                         "codegolf.fast": FastReward(context)},
                        {"codegolf.correct": 1.0, "codegolf.concise": 0.2,
                         "codegolf.fast": 0.0})
    asyncio.run(rewards.score_group(samples, task))
    good, broken = samples
    assert good.rewards == {"codegolf.correct": 1.0, "codegolf.concise": 1.0,
                            "codegolf.fast": 1.0}
    assert good.reward == pytest.approx(1.2) and good.status is SampleStatus.COMPLETED
    assert broken.reward == 0.0 and broken.metadata["codegolf"]["reason"] == "syntax_error"
    first_record = good.metadata["codegolf"]
    asyncio.run(rewards.score_group(samples, task))
    assert good.metadata["codegolf"] is first_record  # cached, not rerun


def test_rewards_refuse_tasks_that_are_not_codegolf_tasks():
    from rollyard import Task

    reward = CorrectReward(RewardContext(tokenizer=None, options={}))
    with pytest.raises(ValueError, match="'toy-1' is not a codegolf task"):
        asyncio.run(reward.score(sample("x"), Task(id="toy-1", prompt="copy: ab")))


def test_a_broken_sandbox_fails_the_sample_instead_of_scoring_it(tasks, monkeypatch):
    from rollyard_codegolf import sandbox as sandbox_module
    from rollyard_codegolf.runner import ProgramRunner
    from rollyard_codegolf.settings import CodegolfSettings

    runner = ProgramRunner(CodegolfSettings.from_options({"timeout": 2.0}))
    monkeypatch.setattr(sandbox_module, "DEVICES", ("/dev/no-such-device",))
    good = sample(reply(ADD_TWO["reference"]))
    [record] = asyncio.run(runner.score_samples([good], tasks["add-two"].to_task()))
    assert record["reason"] == "sandbox_error" and good.status is SampleStatus.FAILED
    assert "could not set up a sandbox" in good.metadata["failure"]
