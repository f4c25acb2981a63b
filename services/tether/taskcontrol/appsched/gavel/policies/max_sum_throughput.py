"""Maximum total throughput: the steps per second of all jobs together, each job's throughput
normalized by its fastest type so that no job counts for more for its step size."""

from __future__ import annotations

import numpy as np

from tether.taskcontrol.appsched.gavel.policies.lp import max_sum
from tether.taskcontrol.appsched.gavel.problem import Allocation, Problem


def max_sum_throughput(problem: Problem) -> Allocation:
    fastest = problem.throughputs.max(axis=1, initial=0.0)
    normalized = np.divide(
        problem.throughputs,
        fastest[:, None],
        out=np.zeros_like(problem.throughputs),
        where=fastest[:, None] > 0,
    )
    return max_sum(problem, normalized)
