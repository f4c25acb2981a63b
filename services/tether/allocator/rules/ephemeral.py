"""The machine has enough free of each ephemeral resource the task asks for (ESCHER's
`set_resource` labels of the job's entitlement)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tether.allocator.rules.base import Fact, Filter, Plan, Reads
from tether.allocator.rules.checks import I64, Check, Rows


class EphemeralResources(Filter):
    reads = Reads(
        job=("task.resources",),
        entitlement=("name",),
        machine=frozenset({Fact.ATTRIBUTES, Fact.USAGE}),
    )

    def checks(self, plan: Plan) -> list[Check]:
        """One check per label, so that Explain names the one missing."""
        need = plan.ephemeral
        first = len(plan.need)
        return [
            _check(plan, first + position, label, int(amount), record is None)
            for position, (label, amount, record) in enumerate(
                zip(need.labels, need.amounts.tolist(), need.records, strict=True)
            )
        ]

    def room(self, plan: Plan) -> Callable[[Rows, I64], I64] | None:
        need = plan.ephemeral
        if not need.labels:
            return None
        first = len(plan.need)
        amounts = need.amounts

        def room(_: Rows, free: I64) -> I64:
            counts: I64 = (free[:, first : first + len(amounts)] // amounts).min(axis=1)
            return np.maximum(counts, 0)

        return room


def _check(plan: Plan, column: int, label: str, need: int, unset: bool) -> Check:
    def free(rows: Rows) -> I64:
        return plan.free(rows)[:, column]

    def closest_miss(examined: Rows, rejected: Rows) -> str:
        if unset:
            return (
                f"entitlement {plan.entitlement.name} has not set it (set_resource), and no "
                "machine offers a resource of that name"
            )
        best = int(free(rejected).max()) if len(rejected) else 0
        return f"need {need}, best has {max(best, 0)} free"

    return Check(
        f"ephemeral.{label}",
        f"insufficient ephemeral resource {label}",
        lambda rows: free(rows) >= need,
        closest_miss,
    )
