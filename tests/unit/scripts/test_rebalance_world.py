"""The rebalancer simulator's world (scripts/rebalance/world.py): churn leaves the region worse
by every measure the rebalancer knows, its rounds make it better, and no job ever has more of
its tasks down than its update policy allows."""

from __future__ import annotations

import sys

from tests.support.scripts import SCRIPTS
from tether.rebalancer.planner import Limits

sys.path.insert(0, str(SCRIPTS))

from rebalance.world import World  # scripts/ is on the path


def test_rounds_undo_what_churn_did_within_every_jobs_update_policy() -> None:
    world = World(machines=96, dcs=2, msbs=4, teams=4, seed=3)
    world.fill(use=0.7, packed_share=0.3)
    world.churn(leave_share=0.4)
    before, largest_before = world.measures(0.0), world.largest_placeable()
    assert before["spread"] > 0, "jobs placed while two MSBs drained are packed"
    now_s = 0.0
    for _ in range(20):
        plan = world.round(Limits(per_job=1, per_minute=50), now_s)
        for _ in range(12):
            world.approve(now_s, restart_s=20.0)
            world.check(now_s)
            now_s += 5.0
        if not plan.moves and not any(sim.moves for sim in world.jobs.values()):
            break
    after = world.measures(now_s)
    assert world.tally.moves_done == world.tally.moves_proposed > 0
    assert after["spread"] < before["spread"]
    assert after["stranded"] < before["stranded"]
    assert world.largest_placeable() >= largest_before
    assert world.tally.unavailability_violations == 0
    assert world.tally.most_down == 1, "the built-in rule lets one task of a small job down"
