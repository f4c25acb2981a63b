"""The ParSync simulator's world (scripts/parsync/world.py): replicas whose views go stale
conflict more than replicas following a watch, and whatever their views, the region's
committed state never holds more on a machine than it has."""

from __future__ import annotations

import sys

import numpy as np

from tests.support.scripts import SCRIPTS

sys.path.insert(0, str(SCRIPTS))

from parsync.world import World, arrivals, summary  # scripts/ is on the path


def run(mode: str, *, read_on_conflict: bool = True) -> tuple[World, dict[str, float]]:
    world = World(
        machines=48,
        replicas=3,
        teams=4,
        mode=mode,
        period_s=2.0,
        partitions=4,
        watch_delay_s=0.01,
        read_on_conflict=read_on_conflict,
    )
    jobs = arrivals(rate_per_s=10.0, horizon_s=20.0, teams=4, lifetime_s=30.0, seed=2)
    return world, summary(world.run(jobs, 20.0))


def test_stale_views_conflict_more_and_never_overcommit() -> None:
    figures = {}
    for mode in ("watch", "oneshot", "parsync"):
        world, figures[mode] = run(mode)
        index = world.truth.region.index
        rows = index.rows
        assert (index.free[:rows] >= 0).all(), f"{mode}: a machine overcommitted"
        assert figures[mode]["tasks_placed"] > 0
    assert figures["watch"]["conflict_rate"] < figures["oneshot"]["conflict_rate"]
    assert figures["watch"]["conflict_rate"] < figures["parsync"]["conflict_rate"]
    # Views a period old on average, at most: about half of it.
    for mode in ("oneshot", "parsync"):
        assert 0.2 < figures[mode]["mean_view_age_s"] < 1.5, figures[mode]


def test_reading_the_machines_of_a_conflict_at_once_saves_retries() -> None:
    _, reading = run("parsync")
    world, waiting = run("parsync", read_on_conflict=False)
    assert reading["attempts_per_request"] < waiting["attempts_per_request"]
    assert reading["gave_up"] <= waiting["gave_up"]
    assert (world.truth.region.index.free[: world.truth.region.index.rows] >= 0).all()
    assert np.isfinite(waiting["conflict_rate"])
