"""Hierarchical fairness (Gavel's multi-level policy): entities (entitlements) share the
accelerators by their weights, and each entity's share is split among its jobs by theirs;
heterogeneity-aware, and filled like water so that what one entity cannot use goes to the
others."""

from __future__ import annotations

import numpy as np

from tether.taskcontrol.appsched.gavel.policies.water_filling import Mask, water_fill
from tether.taskcontrol.appsched.gavel.problem import F64, Allocation, Problem


def hierarchical(problem: Problem) -> Allocation:
    """A job's share is its entity's weight times its own weight over the weights of its
    entity's jobs still rising; its value is its throughput relative to the equal share, times
    its scale factor, over that share (as `max_min_fairness_perf` does with a job's weight).
    When an entity's jobs freeze, its others' shares grow: the entity keeps its weight."""
    relative = problem.relative_to_equal_share()
    entities = np.array(problem.entities)

    def values(rising: Mask) -> F64:
        shares = np.zeros(len(problem.jobs))
        for entity in np.unique(entities[rising]):
            mine = rising & (entities == entity)
            weights = problem.weights[mine]
            shares[mine] = problem.entity_weights[mine] * weights / weights.sum()
        per_job = np.divide(
            problem.scale_factors, shares, out=np.zeros_like(shares), where=shares > 0
        )
        scaled: F64 = relative * per_job[:, None]
        return scaled

    return water_fill(problem, values)
