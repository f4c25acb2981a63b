"""The job's ordered preferences: one bit each, the first the highest, so that a preference
outweighs every later one together."""

from __future__ import annotations

import numpy as np

from tether.allocator.rules.base import Fact, Plan, Reads, Scorer
from tether.allocator.rules.checks import I64, Rows
from tether.allocator.rules.predicates import matches, predicate_text
from tether.model import Job


class Preferences(Scorer):
    reads = Reads(job=("placement.preferences",), machine=frozenset({Fact.ATTRIBUTES}))

    def parts(self, plan: Plan) -> list[tuple[str, int]]:
        preferences = plan.job.spec.placement.preferences
        return [
            (predicate_text(preference), weight)
            for preference, weight in zip(preferences, effective_weights(plan.job), strict=True)
        ]

    def bits(self, plan: Plan) -> int:
        return len(plan.job.spec.placement.preferences)

    def score(self, plan: Plan, rows: Rows) -> I64:
        preferences = plan.job.spec.placement.preferences
        scores = np.zeros(len(rows), np.int64)
        for position, preference in enumerate(preferences):
            bit = np.int64(1) << np.int64(len(preferences) - 1 - position)
            scores |= np.where(matches(plan.index, preference, rows), bit, np.int64(0))
        return scores


def effective_weights(job: Job) -> list[int]:
    """Each preference's weight scaled to exceed every later rule's together (for Explain)."""
    weights: list[int] = []
    below = 0
    for preference in reversed(job.spec.placement.preferences):
        weight = preference.weight * (below + 1)
        weights.append(weight)
        below += weight
    return weights[::-1]
