"""Machines whose allocation record cannot be read take no tasks: placing there could
over-commit them."""

from __future__ import annotations

from tether.allocator.rules.base import Fact, Filter, Plan, Reads
from tether.allocator.rules.checks import Check


class Readable(Filter):
    reads = Reads(machine=frozenset({Fact.RECORD}))

    def checks(self, plan: Plan) -> list[Check]:
        index = plan.index
        return [
            Check(
                "allocation record readable",
                "unreadable allocation record",
                lambda rows: index.readable[rows],
            )
        ]
