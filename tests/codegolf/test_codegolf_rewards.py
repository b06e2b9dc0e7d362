"""codegolf.correct / concise / fast on real sandboxed runs: alone, and through a RewardSet,
where one CodegolfEvaluator runs each program once per sample for all three."""

import asyncio

import pytest
from rollyard import ConfigError, RewardContext, Sample, SampleStatus, Task
from rollyard.rewards import RewardSet
from rollyard_codegolf.evaluator import CodegolfEvaluator
from rollyard_codegolf.options import CodegolfOptions
from rollyard_codegolf.rewards import REWARDS, ConciseReward, CorrectReward, FastReward

ADD_TWO = {
    "reference": "print(sum(map(int,input().split())))",
    "shorter": "print(eval(input().replace(*' +')))",
    "longer": "a,b=map(int,input().split())\nprint(a+b)\n# a comment that makes it long",
    "slow": "import time\ntime.sleep(0.4)\nprint(sum(map(int,input().split())))",
    "partial": "a,b=map(int,input().split())\nprint(a+b if a<100 else 0)",
    "wrong": "print(5)",
    "broken": "print(",
}
OPTIONS = CodegolfOptions(timeout=2.0)


def reply(code: str) -> str:
    return f"Here is my answer:\n```python\n{code}\n```"


def sample(completion: str) -> Sample:
    return Sample(tokens=[1, 2, 3], prompt_len=2, loss_mask=[1], logprobs=[-0.5],
                  task_id="add-two", metadata={"completion": completion})


def score(reward_cls, completions, task, options=OPTIONS):
    """A reward used alone (outside a reward set): it evaluates the group itself."""
    samples = [sample(c) for c in completions]
    reward = reward_cls(RewardContext(tokenizer=None, options=options))
    return asyncio.run(reward.score_group(samples, task)), samples


def reward_set(options=OPTIONS) -> RewardSet:
    """The three rewards with their default weights, as a rollout worker builds them."""
    context = RewardContext(tokenizer=None, options=options)
    return RewardSet({cls.name: cls(context) for cls in REWARDS}, options.reward_weights)


def test_correct_is_the_fraction_of_hidden_tests_or_all_or_nothing(tasks):
    task = tasks["add-two"].to_task()
    completions = [reply(ADD_TWO[k]) for k in ("reference", "partial", "wrong")] + ["no idea"]
    scores, samples = score(CorrectReward, completions, task)
    assert scores == [1.0, pytest.approx(2 / 3), 0.0, 0.0]
    reasons = [s.metadata["codegolf"]["reason"] for s in samples]
    assert reasons == [None, "wrong_answer", "wrong_answer", "no_code"]
    assert samples[0].metadata["codegolf"]["program"] == ADD_TWO["reference"]
    strict, _ = score(CorrectReward, completions, task, CodegolfOptions(correct="all"))
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


def test_options_may_come_as_a_mapping_and_bad_ones_name_the_flag():
    reward = CorrectReward(RewardContext(tokenizer=None, options={"correct": "all"}))
    assert reward.options == CodegolfOptions(correct="all")
    with pytest.raises(ConfigError, match="--codegolf-correct"):
        CorrectReward(RewardContext(tokenizer=None, options={"correct": "most"}))


def test_reward_set_runs_each_program_once_per_sample_for_all_rewards(tasks, sandbox_runs):
    problem = tasks["add-two"]
    task = problem.to_task()
    programs = [ADD_TWO[k] for k in ("shorter", "reference", "wrong", "broken")]
    samples = [sample(reply(p)) for p in programs] + [sample("no program here")]
    rewards = reward_set()
    assert list(rewards.evaluators) == [CodegolfEvaluator]  # one, shared by the three
    asyncio.run(rewards.score_group(samples, task))
    # one scoring pass: each program ran once on each hidden test, not once per reward
    assert sandbox_runs == {program: len(problem.hidden) for program in programs}
    shorter, reference, wrong, broken, missing = samples
    assert set(shorter.rewards) == {"codegolf.correct", "codegolf.concise", "codegolf.fast"}
    assert shorter.rewards["codegolf.correct"] == shorter.rewards["codegolf.concise"] == 1.0
    assert shorter.reward == pytest.approx(1.2)  # fast is recorded with weight 0
    assert shorter.status is SampleStatus.COMPLETED
    assert 0.0 < reference.rewards["codegolf.concise"] < 1.0
    assert {s.rewards["codegolf.fast"] for s in (shorter, reference)} <= {0.0, 1.0}
    for failing, reason in ((wrong, "wrong_answer"), (broken, "syntax_error"),
                            (missing, "no_code")):
        assert failing.reward == 0.0 and failing.metadata["codegolf"]["reason"] == reason
        assert failing.status is SampleStatus.COMPLETED
    asyncio.run(rewards.score_group(samples, task))  # a new call evaluates the group again
    assert sandbox_runs == {program: 2 * len(problem.hidden) for program in programs}
    asyncio.run(rewards.close())


def test_reward_sets_do_not_share_evaluators(tasks):
    first, second = reward_set(), reward_set()
    assert first.evaluators[CodegolfEvaluator] is not second.evaluators[CodegolfEvaluator]
    assert first.evaluators[CodegolfEvaluator].runner is not \
        second.evaluators[CodegolfEvaluator].runner
    for rewards in (first, second):
        asyncio.run(rewards.close())


def test_outcome_metrics_come_from_the_evaluator(tasks):
    task = tasks["add-two"].to_task()
    rewards = reward_set()
    completions = [reply(ADD_TWO["reference"]), reply(ADD_TWO["wrong"]), "nothing", "no"]
    asyncio.run(rewards.score_group([sample(c) for c in completions], task))
    assert rewards.metrics() == {"codegolf/passed": 0.25, "codegolf/wrong_answer": 0.25,
                                 "codegolf/no_code": 0.5,
                                 "codegolf/passing_length": len(ADD_TWO["reference"])}
    assert rewards.metrics() == {}  # reset by each call
    asyncio.run(rewards.close())


def test_a_reward_set_refuses_to_start_without_a_sandbox(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on the PATH
    with pytest.raises(ConfigError, match="--codegolf-unsafe-no-sandbox"):
        reward_set()


def test_rewards_refuse_tasks_that_are_not_codegolf_tasks():
    toy = Task(id="toy-1", prompt="copy: ab")
    reward = CorrectReward(RewardContext(tokenizer=None, options=OPTIONS))
    with pytest.raises(ValueError, match="'toy-1' is not a codegolf task"):
        asyncio.run(reward.score(sample("x"), toy))
    rewards = reward_set()
    failed = sample("x")
    asyncio.run(rewards.score_group([failed], toy))
    assert failed.status is SampleStatus.FAILED and failed.reward == 0.0
    assert failed.metadata["failure"].startswith("evaluator CodegolfEvaluator (of reward "
                                                 "'codegolf.correct', 'codegolf.concise', "
                                                 "'codegolf.fast') raised ValueError(")
    asyncio.run(rewards.close())


def test_a_broken_sandbox_fails_the_sample_instead_of_scoring_it(tasks, monkeypatch):
    from rollyard_codegolf import sandbox as sandbox_module

    rewards = reward_set()
    monkeypatch.setattr(sandbox_module, "DEVICES", ("/dev/no-such-device",))
    good = sample(reply(ADD_TWO["reference"]))
    asyncio.run(rewards.score_group([good], tasks["add-two"].to_task()))
    assert good.metadata["codegolf"]["reason"] == "sandbox_error"
    assert good.status is SampleStatus.FAILED and good.rewards["codegolf.correct"] == 0.0
    assert "could not set up a sandbox" in good.metadata["failure"]
    assert rewards.metrics()["codegolf/sandbox_error"] == 1.0
    asyncio.run(rewards.close())
