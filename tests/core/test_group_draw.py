"""Dynamic sampling: a step draws more groups while too few carry a learning signal."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from rollyard.run.group_draw import GroupDraw, draw_groups, has_signal, resample_budget
from rollyard.types import Sample, SampleStatus


def group(group_id: str, rewards: list[float], status=SampleStatus.COMPLETED) -> list[Sample]:
    return [Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[-0.1], reward=r,
                   status=status, group_id=group_id) for r in rewards]


class Engine:
    """Hands out groups from a script: True = rewards differ, False = all equal."""

    def __init__(self, script: list[bool]) -> None:
        self.script = iter(script)
        self.ids = itertools.count()
        self.calls: list[int] = []

    async def __call__(self, counts: dict[str, int]) -> tuple[list[Sample], dict[str, float]]:
        count = counts[""]
        self.calls.append(count)
        samples = []
        for _ in range(count):
            rewards = [0.0, 1.0] if next(self.script) else [0.5, 0.5]
            samples += group(f"g{next(self.ids)}", rewards)
        return samples, {"env/x": float(len(self.calls))}


def test_signal_needs_two_usable_samples_with_different_rewards():
    assert has_signal(group("a", [0.0, 1.0]))
    assert not has_signal(group("a", [1.0, 1.0]))
    assert not has_signal(group("a", [0.0]) + group("a", [1.0], SampleStatus.FAILED))


def test_the_zero_variance_rule_is_the_one_the_trainer_and_the_advantages_use():
    """rollyard.model_facts holds the rule: rewards differing by float noise are equal, and
    group_centred gives such a group zero advantages, as the trainer drops it."""
    from rollyard.algorithms import group_centred
    from rollyard.model_facts import rewards_differ

    assert rewards_differ([0.0, 1e-6]) and not rewards_differ([0.3, 0.3 + 1e-12])
    assert not rewards_differ([2.0]) and not rewards_differ([])
    assert group_centred([0.3, 0.3 + 1e-12, 0.0, 1.0], ["a", "a", "b", "b"])[:2] == [0.0, 0.0]


def test_groups_without_signal_are_replaced_until_the_step_is_full():
    engine = Engine([True, False, False, True, False, True, True, True])
    drawn = asyncio.run(draw_groups(engine, wanted={"": 4}, budget=16, refill=True))
    assert engine.calls == [4, 2, 1]  # the shortfall each time
    assert drawn.signal_groups() == 4 and drawn.groups_drawn == 7
    assert drawn.metrics() == {"rollout/zero_variance_share": 0.5, "rollout/resamples": 2.0,
                               "rollout/groups_drawn": 7.0, "rollout/signal_groups": 4.0,
                               "rollout/replayed": 0.0}
    trained = drawn.training_samples({"": 4})
    assert len({s.group_id for s in trained}) == 4 and all(
        has_signal([s for s in trained if s.group_id == g]) for g in {"g0", "g3", "g5", "g6"})
    assert drawn.worker_metrics == {"env/x": 2.0}  # mean over the three draws


def test_the_resample_budget_bounds_the_draws():
    engine = Engine([False] * 100)
    drawn = asyncio.run(draw_groups(engine, wanted={"": 4}, budget=resample_budget(4, 2.5),
                                    refill=True))
    assert drawn.groups_drawn == 10 and sum(engine.calls) == 10
    assert drawn.signal_groups() == 0
    # the first four groups, for the trainer to skip
    assert len(drawn.training_samples({"": 4})) == 8


def test_nothing_is_redrawn_when_equal_groups_are_kept():
    engine = Engine([False, False, True])
    drawn = asyncio.run(draw_groups(engine, wanted={"": 3}, budget=12, refill=False))
    assert engine.calls == [3] and drawn.metrics()["rollout/resamples"] == 0.0
    assert drawn.metrics()["rollout/zero_variance_share"] == pytest.approx(2 / 3)


def test_kept_equal_groups_are_trained_on():
    engine = Engine([False, True, False])
    drawn = asyncio.run(draw_groups(engine, wanted={"": 3}, budget=12, refill=False))
    assert len(drawn.training_samples({"": 3}, signal_only=False)) == 6
    assert len(drawn.training_samples({"": 3})) == 2


def test_a_replayed_sample_gives_its_equal_group_a_signal_and_is_trained_not_counted():
    settled, other = group("g0", [0.5, 0.5]), group("g1", [0.5, 0.5])
    best = group("g0", [1.5])[0]
    drawn = GroupDraw(settled + other, {}, replayed=[best])
    assert drawn.samples == settled + other  # what the step's sample metrics describe
    assert drawn.signal_groups() == 1 and drawn.metrics()["rollout/replayed"] == 1.0
    assert drawn.training_samples({"": 2}) == [*settled, best]


def test_a_replayed_sample_is_dropped_with_its_group():
    drawn = GroupDraw(group("g0", [0.0, 1.0]), {}, replayed=group("g9", [2.0]))
    assert drawn.groups() == [group("g0", [0.0, 1.0])]


def test_replayed_samples_count_towards_the_groups_with_a_signal_when_redrawing():
    async def engine(counts):
        count = counts[""]
        samples = [s for i in range(count) for s in group(f"g{i}", [0.5, 0.5])]
        return samples, {}, [group(f"g{i}", [1.0])[0] for i in range(count)]

    drawn = asyncio.run(draw_groups(engine, wanted={"": 3}, budget=12, refill=True))
    assert drawn.draws == 1 and drawn.signal_groups() == 3
