"""The linear programs the policies share, solved with HiGHS (scipy.optimize.milp, with no
integer variables: sparse constraints, unlike linprog's typed interface): an
allocation's variables are the jobs x types time fractions, row-major, bounded to [0, 1] where
the job can run and to 0 where it cannot; every job runs at most all the time, and no type
gives more accelerators than it has."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from tether.taskcontrol.appsched.gavel.problem import F64, Allocation, Problem

_MARGIN = 1e-7
"""Relative slack on the minimum the second program keeps: the first's optimum, exactly, can
be just out of the second's reach in floating point."""


class NoSolution(RuntimeError):
    """The solver found no optimal allocation (a bug: the zero allocation is always feasible)."""


def max_min(problem: Problem, coefficients: F64) -> Allocation:
    """The allocation that maximizes the smallest `sum_t coefficients[j, t] * x[j, t]` over the
    jobs that can run on some accelerator there is; then, keeping every such job at that
    minimum at least, the sum of them. The minimum alone leaves the jobs above it wherever the
    solver happens to stop, accelerators idle among them; the second program hands out what
    the first left."""
    jobs, types = problem.shape
    usable = coefficients * problem.runnable() * (problem.counts > 0)
    counted = np.flatnonzero(usable.sum(axis=1) > 0)
    if not len(counted):
        return np.zeros((jobs, types))
    rows, caps, upper = _base(problem)
    values = _per_job(coefficients)[counted]
    # First the minimum, one more variable z: z - sum_t c[j, t] x[j, t] <= 0 for each job.
    floor = sparse.hstack([-values, sparse.csr_array(np.ones((len(counted), 1)))])
    padded = sparse.hstack([rows, sparse.csr_array((rows.shape[0], 1))])
    objective = np.zeros(jobs * types + 1)
    objective[-1] = -1.0
    first = _solve(
        objective,
        sparse.vstack([padded, floor]).tocsr(),
        np.concatenate([caps, np.zeros(len(counted))]),
        Bounds(np.append(np.zeros(len(upper)), -np.inf), np.append(upper, np.inf)),
    )
    # Then the most in all with every job at the minimum (less a rounding margin).
    least = first[-1] * (1 - _MARGIN)
    second = _solve(
        -usable.reshape(-1),
        sparse.vstack([rows, -values]).tocsr(),
        np.concatenate([caps, np.full(len(counted), -least)]),
        Bounds(np.zeros(len(upper)), upper),
    )
    return second.reshape(jobs, types)


def max_sum(problem: Problem, coefficients: F64) -> Allocation:
    """The allocation that maximizes `sum_j sum_t coefficients[j, t] * x[j, t]`."""
    jobs, types = problem.shape
    if not jobs:
        return np.zeros((0, types))
    rows, caps, upper = _base(problem)
    bounds = Bounds(np.zeros(len(upper)), upper)
    solution = _solve(-coefficients.reshape(-1), rows.tocsr(), caps, bounds)
    return solution.reshape(jobs, types)


def _base(problem: Problem) -> tuple[sparse.csr_array, F64, F64]:
    """The constraints every allocation meets: each job's row sums to at most 1, each type's
    accelerators (scale factor times time fraction) to at most its count; and the variables'
    upper bounds (1 where the job can run, else 0)."""
    jobs, types = problem.shape
    per_job = _per_job(np.ones((jobs, types)))
    per_type = sparse.csr_array(
        (
            np.repeat(problem.scale_factors, types),
            (np.tile(np.arange(types), jobs), np.arange(jobs * types)),
        ),
        shape=(types, jobs * types),
    )
    caps = np.concatenate([np.ones(jobs), problem.counts])
    upper = problem.runnable().reshape(-1).astype(np.float64)
    return sparse.vstack([per_job, per_type]).tocsr(), caps, upper


def _per_job(values: F64) -> sparse.csr_array:
    """One row per job holding its `values` over the job's own variables."""
    jobs, types = values.shape
    return sparse.csr_array(
        (values.reshape(-1), (np.repeat(np.arange(jobs), types), np.arange(jobs * types))),
        shape=(jobs, jobs * types),
    )


def _solve(objective: F64, rows: sparse.csr_array, caps: F64, bounds: Bounds) -> F64:
    """Minimizes `objective` with `rows @ x <= caps` within `bounds`."""
    constraint = LinearConstraint(rows, -np.inf, caps)
    result = milp(objective, constraints=constraint, bounds=bounds)
    if result.status != 0 or result.x is None:
        raise NoSolution(f"HiGHS found no optimal allocation: {result.message}")
    solution: F64 = np.clip(result.x, 0.0, None)
    return solution
