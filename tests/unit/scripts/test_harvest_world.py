"""The harvest simulator's world (scripts/harvest/world.py): every invocation ends one way
(succeeded, killed or rejected), notices save the ones a shrink displaces, and Min-Worker-Set
starts fewer instances cold than the spread on the same arrivals."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from tests.support.scripts import SCRIPTS

sys.path.insert(0, str(SCRIPTS))

from harvest.traces import TraceShape  # scripts/ is on the path, not a package
from harvest.world import Tally, World

HORIZON_S = 2 * 3600.0


def arrivals(services: int, per_s: float, seed: int) -> list[tuple[float, int, float]]:
    rng = np.random.default_rng(seed)
    found, at = [], 0.0
    while (at := at + rng.exponential(1 / per_s)) < HORIZON_S:
        found.append((at, int(rng.integers(services)), float(rng.exponential(120))))
    return found


def run(*, min_worker_set: bool, notices: bool) -> Tally:
    world = World(
        machines=8,
        harvest_share=0.75,
        services=4,
        # Down to an eighth of the cores, and now and then an eviction.
        shape=TraceShape(min_share=0.125, evictions_per_hour=0.2),
        horizon_s=HORIZON_S,
        min_worker_set=min_worker_set,
        notices=notices,
        notice_s=30,
        keep_alive_s=60,
        seed=3,
    )
    return world.run(arrivals(4, 0.25, seed=4))


@pytest.mark.parametrize("notices", [True, False])
def test_every_invocation_ends_exactly_one_way(notices: bool) -> None:
    tally = run(min_worker_set=True, notices=notices)
    assert tally.invocations > 1000
    assert tally.succeeded + tally.killed + tally.rejected == tally.invocations
    assert tally.notices["harvest-shrink"] > 0


def test_notices_save_the_displaced_and_mws_starts_fewer_cold() -> None:
    with_notices, without = (
        run(min_worker_set=True, notices=True),
        run(min_worker_set=True, notices=False),
    )
    assert with_notices.moved > 0
    assert without.killed > with_notices.killed
    spread = run(min_worker_set=False, notices=True)
    assert with_notices.cold_starts < spread.cold_starts, (with_notices, spread)
