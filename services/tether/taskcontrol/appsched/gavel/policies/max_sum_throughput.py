"""Maximum total throughput: the steps per second of all jobs together, each job's throughput
normalized by its fastest type so that no job counts for more for its step size."""

from __future__ import annotations

from tether.taskcontrol.appsched.gavel.policies.lp import max_sum
from tether.taskcontrol.appsched.gavel.problem import Allocation, Problem


def max_sum_throughput(problem: Problem) -> Allocation:
    return max_sum(problem, problem.relative_to_fastest())
