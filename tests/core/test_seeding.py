"""Sampling seeds come from the run's seed and a group's place in the run, never from how the
work was scheduled: the same groups get the same seeds at any concurrency and in any order."""

import asyncio
import random

from rollyard import Rollout, RolloutContext, Task
from rollyard.episodes import sample_single_turn
from rollyard.rewards import RewardSet
from rollyard.run.collect import CollectSettings, collect_step
from rollyard.seeding import SEED_SPACE, derive_seed, group_seed, request_seed, seeded_group
from rollyard.testing import ScriptedTransport
from rollyard.types import SamplingParams

TASKS = [Task(id=f"t-{i}", prompt=f"word {i}") for i in range(6)]


class ByteTokenizer:
    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [1 + (ord(c) % 200) for c in text]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)

    def __len__(self):
        return 256


class Jittery(Rollout):
    """Single-turn episodes whose groups finish in a random order."""

    name = "jittery"

    def __init__(self, transport, sampling=None, jitter=0) -> None:
        super().__init__(RolloutContext({}, ByteTokenizer(), transport,
                                        sampling=sampling or SamplingParams(max_new_tokens=4)))
        self.jitter = random.Random(jitter)

    def tasks(self, split):
        return TASKS

    async def run_group(self, task, n):
        await asyncio.sleep(self.jitter.random() / 100)
        return await sample_single_turn(self.context, task, n)


def requested_seeds(concurrency: int, jitter: int, seeds, sampling=None) -> dict:
    transport = ScriptedTransport(tokenizer=ByteTokenizer())
    settings = CollectSettings(group_size=3, max_concurrent_groups=concurrency,
                               group_timeout_s=5.0)
    samples = asyncio.run(collect_step(Jittery(transport, sampling, jitter), RewardSet({}, {}),
                                       TASKS, settings, seeds))
    by_session = {r.session_id: r.sampling.seed for r in transport.requests}
    return {"seeds": by_session, "groups": [s.group_id for s in samples]}


def test_derived_seeds_are_stable_distinct_and_in_range():
    seeds = [derive_seed(0, step, draw) for step in range(1, 20) for draw in range(16)]
    assert seeds == [derive_seed(0, step, draw) for step in range(1, 20) for draw in range(16)]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < SEED_SPACE for s in seeds)
    assert derive_seed(1, 1, 0) != derive_seed(0, 1, 0)


def test_group_seeds_do_not_depend_on_concurrency_or_completion_order():
    seeds = [derive_seed(7, 1, i) for i in range(len(TASKS))]
    one_at_a_time = requested_seeds(concurrency=1, jitter=0, seeds=seeds)
    all_at_once = requested_seeds(concurrency=6, jitter=1, seeds=seeds)
    shuffled = requested_seeds(concurrency=3, jitter=2, seeds=seeds)
    assert one_at_a_time == all_at_once == shuffled
    assert len(set(one_at_a_time["seeds"].values())) == len(TASKS) * 3  # one per sample
    # groups are named from their seed, so samples.jsonl repeats too
    assert one_at_a_time["groups"][0] == f"t-0/{seeds[0]:08x}"


def test_without_seeds_requests_stay_unseeded():
    got = requested_seeds(concurrency=2, jitter=0, seeds=None)
    assert set(got["seeds"].values()) == {None}


def test_a_seed_the_rollout_sets_itself_wins():
    got = requested_seeds(concurrency=2, jitter=0, seeds=[1] * len(TASKS),
                          sampling=SamplingParams(max_new_tokens=4, seed=100))
    assert sorted(set(got["seeds"].values())) == [100, 101, 102]


def test_group_seed_reaches_tasks_started_inside_the_group():
    async def inside():
        with seeded_group(42):
            return await asyncio.create_task(asyncio.sleep(0, result=group_seed())), \
                request_seed(1), request_seed(1, turn=2)

    seed, first_turn, third_turn = asyncio.run(inside())
    assert seed == 42
    assert first_turn == derive_seed(42, 1, 0) and third_turn == derive_seed(42, 1, 2)
    assert group_seed() is None and request_seed(0) is None
