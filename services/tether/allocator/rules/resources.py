"""The machine's free resources cover one task in every dimension the task needs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tether.allocator.rules.base import Fact, Filter, FreeOf, Plan, Reads
from tether.allocator.rules.checks import I64, Check, Rows
from tether.model.resources import quantity_text


class Resources(Filter):
    reads = Reads(job=("task.resources",), machine=frozenset({Fact.CAPACITY, Fact.USAGE}))

    def checks(self, plan: Plan) -> list[Check]:
        """One check per dimension the task needs, so that Explain names the one missing."""
        labels = plan.index.dimensions
        return [
            _check(labels[column], column, int(amount), plan.free)
            for column, amount in enumerate(plan.need)
            if amount
        ]

    def room(self, plan: Plan) -> Callable[[Rows], I64]:
        # Every dimension from one read of the free resources.
        return lambda rows: slots(plan.free(rows), plan.need)


def _check(label: str, column: int, need: int, free_of: FreeOf) -> Check:
    def free(rows: Rows) -> I64:
        return free_of(rows)[:, column]

    def closest_miss(examined: Rows, rejected: Rows) -> str:
        best = int(free(rejected).max()) if len(rejected) else 0
        return f"need {quantity_text(label, need)}, best has {quantity_text(label, best)} free"

    return Check(
        f"resources.{label}", f"insufficient {label}", lambda rows: free(rows) >= need, closest_miss
    )


def slots(free: I64, need: I64) -> I64:
    """Per row of `free`, how many tasks of `need` fit."""
    wanted = need > 0
    if not wanted.any():
        return np.full(len(free), 1 << 20, np.int64)
    fitting: I64 = (np.maximum(free[:, wanted], 0) // need[wanted]).min(axis=1)
    return fitting
