"""Mixing environments: the selection syntax and its refusals, exact quotas, the weighted task
source's state, and dynamic sampling refilling each environment from itself."""

from __future__ import annotations

import asyncio
import random
from fractions import Fraction

import pytest
from rollyard.config import RunConfig, build_run_config
from rollyard.errors import ConfigError
from rollyard.plugin_options import OptionTables
from rollyard.run.group_draw import draw_groups
from rollyard.run.task_source import SingleSource, TaskCycle, WeightedSource, split_quotas
from rollyard.types import Sample


def quotas_over(steps: int, groups: int, weights: dict[str, int]) -> list[tuple[int, ...]]:
    carried: dict[str, Fraction] = {}
    out = []
    for _ in range(steps):
        quotas, carried = split_quotas(groups, {k: Fraction(v) for k, v in weights.items()},
                                       carried)
        out.append(tuple(quotas.values()))
    return out


def test_quotas_are_exact_every_step_when_they_can_be_and_in_the_long_run_when_not():
    assert quotas_over(5, 8, {"a": 1, "b": 3}) == [(2, 6)] * 5
    steps = quotas_over(300, 64, {"a": 1, "b": 2})
    assert set(steps) == {(21, 43), (22, 42)} and all(sum(s) == 64 for s in steps)
    assert sum(a for a, _ in steps) == 300 * 64 // 3  # exactly a third over 300 steps
    for prefix in range(1, 301):  # and never more than one group off on the way
        assert abs(sum(a for a, _ in steps[:prefix]) - prefix * 64 / 3) < 1
    thirds = quotas_over(7, 10, {"a": 1, "b": 1, "c": 1})
    assert all(sum(s) == 10 for s in thirds) and sum(s[0] for s in thirds[:3]) == 10


def test_the_weighted_source_resumes_exactly_and_refuses_another_mix():
    def source() -> WeightedSource:
        return WeightedSource({"a": 5, "b": 7}, {"a": 1.0, "b": 2.0}, seed=4, groups_per_step=4)

    straight, first = source(), source()
    taken = []
    for _ in range(3):
        plan = straight.plan(4)
        taken.append({label: straight.take(label, n) for label, n in plan.items()})
    for _ in range(2):
        for label, n in first.plan(4).items():
            first.take(label, n)
    second = source()
    second.load_state_dict(first.state_dict())
    plan = second.plan(4)
    assert {label: second.take(label, n) for label, n in plan.items()} == taken[2]
    assert second.drawn == straight.drawn == 12
    other = WeightedSource({"a": 5, "c": 7}, {"a": 1.0, "c": 2.0}, seed=4, groups_per_step=4)
    with pytest.raises(ConfigError, match=r"environments \['a', 'b'\], this run has"):
        other.load_state_dict(first.state_dict())


def test_one_environment_draws_as_a_run_did_before_mixing():
    single, cycle = SingleSource("toy", 9, random.Random(0)), TaskCycle(9, random.Random(0))
    assert single.plan(5) == {"toy": 5}
    assert single.take("toy", 5) == cycle.take(5)
    assert single.state_dict() == cycle.state_dict()


def test_a_mix_that_starves_an_environment_is_refused():
    with pytest.raises(ConfigError, match="gives environment 'a' less than one group per step"):
        WeightedSource({"a": 3, "b": 3}, {"a": 1.0, "b": 9.0}, seed=0, groups_per_step=8)


def config(**layer) -> RunConfig:
    return build_run_config(OptionTables(), [("run.toml", layer)])


@pytest.mark.parametrize("value, message", [
    ("toy:0", "weight '0' must be a positive number"),
    ("toy:-1,guess", "weight '-1' must be a positive number"),
    ("toy:1x", "weight '1x' is not a number"),
    ("toy:.", "weight '.' is not a number"),
    ("toy,,guess", "an empty name"),
    ("toy:1,toy:2", "environment 'toy' is given twice"),
])
def test_bad_mixes_on_the_command_line(value, message):
    with pytest.raises(ConfigError, match=message) as error:
        build_run_config(OptionTables(), [], {"--rollout-plugin": value})
    assert str(error.value).startswith(f"--rollout-plugin {value!r}")


@pytest.mark.parametrize("tables, message", [
    ([{"name": "toy", "wieght": 2}], "unknown key 'wieght' (did you mean 'weight'?)"),
    ([{"weight": 2}], "'name' (the rollout plugin) is required"),
    ([{"name": "toy", "weight": True}], "weight True must be a positive number"),
    ([{"name": "toy"}, {"name": "toy"}], "give each [[rollout]] table its own alias"),
    ([{"name": "toy", "alias": "a b"}], "alias 'a b' must be letters"),
    ([{"name": "toy", "group_size": 0}], "'group_size' 0: must be greater than 0"),
    ([{"name": "toy", "options": 3}], "'options' must be a table"),
    ({"name": "toy"}, "unknown table [rollout]"),
])
def test_bad_rollout_tables(tables, message):
    with pytest.raises(ConfigError) as error:
        config(rollout=tables)
    assert message in str(error.value) and str(error.value).startswith("run.toml")


def test_rollout_tables_round_trip_through_config_json_and_flags_win():
    mixed = config(rollout=[{"name": "toy", "alias": "copy"},
                            {"name": "toy", "alias": "rev", "weight": 3, "max_new_tokens": 5,
                             "reward": ["exact-match"], "options": {"operation": "reverse"}}])
    assert mixed.mixed and mixed.rollout_plugin == "copy:1,rev:3"
    assert [e.label for e in mixed.environments] == ["copy", "rev"]
    assert RunConfig.from_data(mixed.to_data(), OptionTables()) == mixed
    assert ("reward", "exact-match") in mixed.wanted_plugins()
    overridden = build_run_config(OptionTables(), [("run.toml", mixed.to_data())],
                                  {"--rollout-plugin": "guess"})
    assert overridden.environments[0].name == "guess" and not overridden.mixed


def test_qualified_names_with_and_without_weights():
    mix = build_run_config(OptionTables(), [], {"--rollout-plugin": "rollyard:guess:2,toy"})
    assert [(e.name, e.weight) for e in mix.environments] == [("rollyard:guess", 2.0),
                                                               ("toy", 1.0)]


def test_rollout_plugin_beside_rollout_tables_is_refused():
    with pytest.raises(ConfigError, match="give either rollout_plugin or"):
        config(rollout_plugin="guess", rollout=[{"name": "toy"}])


def test_dynamic_sampling_refills_an_environment_from_itself():
    """Environment b's groups never carry a signal; a's always do: only b is drawn again."""
    asked: list[dict[str, int]] = []

    async def draw(wanted):
        asked.append(dict(wanted))
        samples = []
        for env, count in wanted.items():
            for g in range(count):
                rewards = [0.0, 1.0] if env == "a" else [0.5, 0.5]
                samples += [Sample(tokens=[1, 2], prompt_len=1, loss_mask=[1], logprobs=[0.0],
                                   reward=r, group_id=f"{env}{len(asked)}-{g}",
                                   metadata={"env": env}) for r in rewards]
        return samples, {}, []

    drawn = asyncio.run(draw_groups(draw, {"a": 1, "b": 3}, budget=8, refill=True))
    assert asked == [{"a": 1, "b": 3}, {"b": 3}, {"b": 1}]
    trained = drawn.training_samples({"a": 1, "b": 3})
    assert sum(s.metadata["env"] == "a" for s in trained) == 2  # a's one group
    assert sum(s.metadata["env"] == "b" for s in trained) == 6  # b's first three, to skip
    assert drawn.metrics()["rollout/zero_variance_share/b"] == 1.0


def test_rollout_resources_no_node_has_are_refused_before_a_worker_waits_forever(
        monkeypatch):
    import ray
    from rollyard.run.rollout_workers import worker_resources

    nodes = [{"Alive": True, "Resources": {"CPU": 2.0, "env_node": 1.0, "node:10.0.0.1": 1.0}},
             {"Alive": False, "Resources": {"CPU": 8.0, "gpu_box": 4.0}}]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    assert worker_resources(("env_node=1",)) == {"env_node": 1.0}
    assert worker_resources(()) == {}
    with pytest.raises(ConfigError, match=r"--rollout-resources env_node=2: no node of the Ray "
                                          r"cluster has that much \(most on one node: 1; "
                                          r"custom resources there: env_node\)"):
        worker_resources(("env_node=2",))
    with pytest.raises(ConfigError, match="gpu_box=1: no node"):  # only on a dead node
        worker_resources(("gpu_box=1",))


def test_an_environment_places_its_workers_by_its_own_resources():
    mixed = config(rollout=[{"name": "toy", "alias": "here"},
                            {"name": "toy", "alias": "there",
                             "rollout_resources": ["env_node=1"]}])
    assert mixed.environments[1].overrides == {"rollout_resources": ("env_node=1",)}
    with pytest.raises(ConfigError, match="'rollout_resources'"):
        config(rollout=[{"name": "toy", "rollout_resources": ["env_node"]}])
