"""Finish-time fairness (Themis, as Gavel formulates it): the worst ratio, over the jobs, of
the time a job would take to finish under the allocation to the time it would take under the
heterogeneity-blind equal share, as small as it can be."""

from __future__ import annotations

import numpy as np

from tether.taskcontrol.appsched.gavel.policies.lp import max_min, max_min_value
from tether.taskcontrol.appsched.gavel.problem import F64, Allocation, Problem

PRECISION = 1e-3
"""The ratio is found by bisection to within this (absolute): every step is one program."""


def agnostic(problem: Problem) -> Allocation:
    """Every type counts as equally fast (Gavel's blind variant; the central optimum, not a
    vertex: `lp.solve`)."""
    return _fairest(problem.blind(), central=True)


def heterogeneity_aware(problem: Problem) -> Allocation:
    """Job j, `t` seconds in, with `r` steps left, finishes at `t + r / throughput`; under the
    equal share at `D = t + r / equal`. The ratio `rho` is reachable when every job's
    throughput can be at least `r / (rho * D - t)` at once: a max-min program whose value is
    1 or more. The equal share itself reaches 1, so `rho` lies between the largest `t / D` and
    1, and bisection finds it; the allocation is the max-min one at that `rho`."""
    return _fairest(problem, central=False)


def _fairest(problem: Problem, *, central: bool) -> Allocation:
    equal = problem.effective_throughputs(problem.equal_share())
    left, elapsed = problem.remaining_steps, problem.elapsed_s
    counted = (left > 0) & (equal > 0)
    if not counted.any():
        return np.zeros(problem.shape)
    finish = elapsed + np.divide(left, equal, out=np.zeros_like(left), where=counted)

    def coefficients(ratio: float) -> F64:
        # Throughput over what the job needs to finish by ratio * D (0 for jobs not counted).
        slack = np.where(counted, ratio * finish - elapsed, 1.0)
        need = np.divide(left, slack, out=np.zeros_like(left), where=counted)
        return problem.throughputs_over(need)

    low = float(np.max(np.divide(elapsed, finish, out=np.zeros_like(left), where=counted)))
    high = 1.0
    while high - low > PRECISION:
        middle = (low + high) / 2
        if max_min_value(problem, coefficients(middle)) >= 1.0:
            high = middle
        else:
            low = middle
    return max_min(problem, coefficients(high), central=central)
