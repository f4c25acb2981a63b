"""Only machines of the free pool or of the job's entitlement."""

from __future__ import annotations

from tether.allocator.index import NONE
from tether.allocator.rules.base import Fact, Filter, Plan, Reads
from tether.allocator.rules.checks import Check, listed


class Ownership(Filter):
    reads = Reads(machine=frozenset({Fact.OWNER}))
    met_by_candidates = True

    def checks(self, plan: Plan) -> list[Check]:
        index, owner = plan.index, plan.owner
        return [
            Check(
                f"entitlement free pool or {plan.entitlement.name}",
                "assigned to another entitlement",
                lambda rows: (index.owner[rows] == NONE) | (index.owner[rows] == owner),
                lambda _, rejected: (
                    "assigned to "
                    + listed(
                        {index.owners.name(int(code)) or "" for code in set(index.owner[rejected])}
                    )
                ),
            )
        ]
