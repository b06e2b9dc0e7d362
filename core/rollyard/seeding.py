"""Seeds derived from the run's ``--seed``, so that the same seed makes the same random choices
whatever order the work happens to be scheduled in.

Every group of episodes gets its own sampling seed, derived from the run's seed, the step and
the group's place in the run's sequence of drawn tasks (never from a worker, a thread or a
clock). The core sets it around ``Rollout.run_group``; :func:`request_seed` turns it into the
seed of one request, and :func:`rollyard.episodes.sample_single_turn` uses it for every sample.
A rollout that builds its own requests passes ``request_seed(i)`` (or ``request_seed(i, turn)``
for later turns of a multi-turn episode) as ``SamplingParams.seed``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

#: Derived seeds lie in ``[0, SEED_SPACE)``: non-negative and within a signed 32-bit integer,
#: which every engine's ``sampling_seed`` accepts.
SEED_SPACE = 2**31 - 1

_GROUP_SEED: ContextVar[int | None] = ContextVar("rollyard_group_seed", default=None)


def derive_seed(*parts: object) -> int:
    """A seed from ``parts`` (the run's seed, a step, a draw index …): the same parts always
    give the same seed, in any process; different parts give unrelated seeds."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") % SEED_SPACE


def group_seed() -> int | None:
    """The sampling seed of the group being run, or None outside a run's ``run_group``."""
    return _GROUP_SEED.get()


@contextmanager
def seeded_group(seed: int | None) -> Iterator[None]:
    """Make ``seed`` the group seed of everything run inside (the asyncio tasks started in it
    included: they copy the context)."""
    token = _GROUP_SEED.set(seed)
    try:
        yield
    finally:
        _GROUP_SEED.reset(token)


def request_seed(sample_index: int, turn: int = 0) -> int | None:
    """The sampling seed of turn ``turn`` of sample ``sample_index`` in the current group;
    None when no group seed is set (the engine then uses its own randomness)."""
    seed = group_seed()
    return None if seed is None else derive_seed(seed, sample_index, turn)
