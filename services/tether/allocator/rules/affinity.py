"""Co-location with another job's tasks, or (anti) away from them, by machine or by rack."""

from __future__ import annotations

import numpy as np

from tether.allocator.rules.base import Fact, Filter, Plan, Reads
from tether.allocator.rules.checks import Check, Mask, Rows
from tether.model import Affinity


class Affinities(Filter):
    reads = Reads(
        job=("placement.affinities",), machine=frozenset({Fact.PLACEMENTS, Fact.TOPOLOGY})
    )

    def checks(self, plan: Plan) -> list[Check]:
        return [_check(plan, affinity) for affinity in plan.job.spec.placement.affinities]


def _check(plan: Plan, affinity: Affinity) -> Check:
    index, where = plan.index, affinity.level

    def accepts(rows: Rows) -> Mask:
        other = np.fromiter(index.held(affinity.job).values(), np.intp)
        if where == "rack":
            inside = np.isin(index.rack[rows], index.rack[other])
        else:
            inside = np.isin(rows, other)
        return ~inside if affinity.anti else inside

    if affinity.anti:
        return Check(
            f"anti-affinity {affinity.job} ({where})", f"{where} holds tasks of {affinity.job}",
            accepts,
        )  # fmt: skip
    return Check(
        f"affinity {affinity.job} ({where})", f"{where} holds no task of {affinity.job}", accepts
    )
