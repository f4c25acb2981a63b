"""Harvest machines take only tasks of jobs that tolerate them (`placement.harvest`), and a
machine its host takes back soon (an eviction notice) takes none."""

from __future__ import annotations

from tether.allocator.index.codes import EVICTING, REGULAR
from tether.allocator.rules.base import Fact, Filter, Plan, Reads
from tether.allocator.rules.checks import Check


class Harvest(Filter):
    reads = Reads(job=("placement.harvest",), machine=frozenset({Fact.HARVEST}))

    def checks(self, plan: Plan) -> list[Check]:
        index = plan.index
        checks = [
            Check(
                "no eviction notice",
                "taken back by its host soon (an eviction notice)",
                lambda rows: index.harvest[rows] != EVICTING,
            )
        ]
        if not plan.job.spec.placement.harvest:
            checks.append(
                Check(
                    "not a harvest machine",
                    "a harvest machine (the job does not set placement.harvest)",
                    lambda rows: index.harvest[rows] == REGULAR,
                )
            )
        return checks
