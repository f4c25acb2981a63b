"""Minimum makespan: the time by which every active job finishes, were the allocation kept, is
as short as it can be."""

from __future__ import annotations

from tether.taskcontrol.appsched.gavel.policies.lp import max_min
from tether.taskcontrol.appsched.gavel.problem import Allocation, Problem


def min_total_duration(problem: Problem) -> Allocation:
    """Every job finishes by T when its throughput is at least its steps left over T: the
    smallest T maximizes the smallest throughput over steps left, one linear program (not a
    search over T). Jobs with no steps left get nothing."""
    return max_min(problem, problem.throughputs_over(problem.remaining_steps))
