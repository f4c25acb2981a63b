"""First in, first out: the oldest jobs run all the time, each on one type, until the
accelerators are taken; the others wait."""

from __future__ import annotations

import numpy as np

from tether.taskcontrol.appsched.gavel.problem import Allocation, Problem


def agnostic(problem: Problem) -> Allocation:
    """Each job, oldest first, on the type it ran on last round if that has room for its whole
    gang (a blind policy has no reason to move it), else on the type with the most accelerators
    free that it can run on and that has room."""
    return _first_come(problem, aware=False)


def heterogeneity_aware(problem: Problem) -> Allocation:
    """Each job, oldest first, on its fastest type that has room for its whole gang."""
    return _first_come(problem, aware=True)


def _first_come(problem: Problem, *, aware: bool) -> Allocation:
    free = problem.counts.copy()
    allocation = np.zeros(problem.shape)
    runs = problem.runnable()
    for job in range(len(problem.jobs)):
        gang = problem.scale_factors[job]
        fits = np.flatnonzero(runs[job] & (free >= gang))
        if not len(fits):
            continue
        ranks = problem.throughputs[job, fits] if aware else free[fits]
        kind = int(fits[np.argmax(ranks)])
        if not aware and problem.running_on and problem.running_on[job] in problem.accelerators:
            stay = problem.accelerators.index(problem.running_on[job])
            kind = stay if stay in fits else kind
        allocation[job, kind] = 1.0
        free[kind] -= gang
    return allocation
