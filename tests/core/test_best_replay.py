"""Best-sample replay: each task's best sample so far joins a later group that fell below it."""

from __future__ import annotations

import pickle

from rollyard.run.best_replay import BestSamples, rescore_replayed
from rollyard.types import Sample, SampleStatus


def group(task: str, group_id: str, rewards: list[float], version: int = 0,
          status: SampleStatus = SampleStatus.COMPLETED) -> list[Sample]:
    return [Sample(tokens=[1, 2 + i], prompt_len=1, loss_mask=[1], logprobs=[-0.5 - i],
                   reward=r, status=status, task_id=task, group_id=group_id,
                   weight_version=version, completion=f"answer {i}", metadata={"env": "e"})
            for i, r in enumerate(rewards)]


def test_the_first_groups_of_a_task_set_its_best_and_replay_nothing():
    best = BestSamples()
    assert best.replays(group("a", "a/0", [0.2, 0.9, 0.4])) == []
    assert {task: s.reward for task, s in best.state_dict().items()} == {"a": 0.9}


def test_a_group_below_the_best_gets_a_copy_of_it_with_the_group_id_and_version():
    best = BestSamples()
    first = group("a", "a/0", [0.2, 0.9], version=1)
    best.replays(first)
    [replayed] = best.replays(group("a", "a/1", [0.5, 0.5], version=4))
    assert replayed.tokens == first[1].tokens and replayed.reward == 0.9
    assert replayed.group_id == "a/1" and replayed.weight_version == 4
    # marked as a replay (old plugins read the mark's metadata key); the environment's
    # metadata and the decoded text are not kept
    assert replayed.replayed_from_version == 1 and replayed.completion is None
    assert replayed.metadata == {"replayed_from_version": 1}
    assert first[1].group_id == "a/0" and first[1].replayed_from_version is None
    assert first[1].metadata == {"env": "e", "completion": "answer 1"}


def test_a_group_that_reaches_the_best_gets_no_copy_and_a_better_one_replaces_it():
    best = BestSamples()
    best.replays(group("a", "a/0", [0.9]))
    assert best.replays(group("a", "a/1", [0.1, 0.9])) == []  # equal is not below
    assert best.replays(group("a", "a/2", [1.5, 0.3])) == []
    [replayed] = best.replays(group("a", "a/3", [1.0]))
    assert replayed.reward == 1.5


def test_tasks_are_kept_apart_and_groups_of_one_call_do_not_replay_each_other():
    best = BestSamples()
    replayed = best.replays(group("a", "a/0", [0.3]) + group("a", "a/1", [0.8])
                            + group("b", "b/0", [0.1]))
    assert replayed == []
    assert {task: s.reward for task, s in best.state_dict().items()} == {"a": 0.8, "b": 0.1}
    assert [s.group_id for s in best.replays(group("a", "a/2", [0.5])
                                             + group("b", "b/1", [0.5]))] == ["a/2"]


def test_unusable_samples_are_neither_kept_nor_compared():
    best = BestSamples()
    best.replays(group("a", "a/0", [2.0], status=SampleStatus.FAILED))
    assert best.state_dict() == {}
    best.replays(group("a", "a/1", [0.4]))
    failed_group = group("a", "a/2", [0.0], status=SampleStatus.ABORTED)
    assert best.replays(failed_group) == []  # no usable sample: nothing to train it with


def test_the_state_round_trips_through_pickle():
    best = BestSamples()
    best.replays(group("a", "a/0", [0.7]))
    restored = BestSamples()
    restored.load_state_dict(pickle.loads(pickle.dumps(best.state_dict())))
    [replayed] = restored.replays(group("a", "a/1", [0.1]))
    assert replayed.reward == 0.7 and replayed.group_id == "a/1"


def test_replayed_samples_being_trained_get_the_current_policys_logprobs():
    best = BestSamples()
    best.replays(group("a", "a/0", [0.9]))
    fresh = group("a", "a/1", [0.1, 0.2])
    [replayed] = best.replays(fresh)
    asked: list[list[Sample]] = []

    def trainer_logprobs(samples: list[Sample]) -> list[list[float]]:
        asked.append(samples)
        return [[-0.25] for _ in samples]

    rescore_replayed([*fresh, replayed], trainer_logprobs)
    assert asked == [[replayed]]
    assert replayed.logprobs == [-0.25]
    assert [s.logprobs for s in fresh] == [[-0.5], [-1.5]]
    assert best.state_dict()["a"].logprobs == [-0.5]  # the kept sample is not changed
    rescore_replayed(fresh, trainer_logprobs)
    assert len(asked) == 1  # nothing replayed: no call
