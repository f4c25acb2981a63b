"""The machine's free resources cover one task in every dimension the task needs."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tether.allocator.rules.base import Fact, Filter, FreeOf, Plan, Reads
from tether.allocator.rules.checks import I64, UNLIMITED_ROOM, Check, Rows
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

    def room(self, plan: Plan) -> Callable[[Rows, I64], I64]:
        return _Slots(plan.need)


def _check(label: str, column: int, need: int, free_of: FreeOf) -> Check:
    def free(rows: Rows) -> I64:
        return free_of(rows)[:, column]

    def closest_miss(examined: Rows, rejected: Rows) -> str:
        best = int(free(rejected).max()) if len(rejected) else 0
        return f"need {quantity_text(label, need)}, best has {quantity_text(label, best)} free"

    return Check(
        f"resources.{label}", f"insufficient {label}", lambda rows: free(rows) >= need, closest_miss
    )


class _Slots:
    """Per row of free resources, how many tasks of `need` fit.

    Called for every chunk of the free pool a plan reads: the needed columns are found once,
    and each is divided on its own (a division over a rows-by-2 block and a minimum along its
    short axis cost three times as much in numpy)."""

    def __init__(self, need: I64) -> None:
        self._columns = [
            (column, amount) for column, amount in enumerate(need.tolist()) if amount > 0
        ]

    def __call__(self, _: Rows, free: I64) -> I64:
        if not self._columns:
            return np.full(len(free), UNLIMITED_ROOM, np.int64)
        (column, amount), *others = self._columns
        room: I64 = free[:, column] // amount
        for column, amount in others:
            np.minimum(room, free[:, column] // amount, out=room)
        return np.maximum(room, 0, out=room)
