"""Minimum makespan: the time by which every active job finishes, were the allocation kept, is
as short as it can be; blind to accelerator types, and aware of them
(`min_total_duration_perf`)."""

from __future__ import annotations

import dataclasses

from tether.taskcontrol.appsched.gavel.policies.lp import max_min
from tether.taskcontrol.appsched.gavel.problem import Allocation, Problem


def agnostic(problem: Problem) -> Allocation:
    """Every type a job can run on counts as fast as its fastest (Gavel's blind program takes
    each job's V100 throughput for every type): the makespan is planned as if time on any type
    were worth the same (the central optimum, not a vertex: `lp.solve`)."""
    fastest = problem.throughputs.max(axis=1, initial=0.0)
    as_fast = dataclasses.replace(problem, throughputs=problem.runnable() * fastest[:, None])
    return max_min(as_fast, as_fast.throughputs_over(as_fast.remaining_steps), central=True)


def heterogeneity_aware(problem: Problem) -> Allocation:
    """Every job finishes by T when its throughput is at least its steps left over T: the
    smallest T maximizes the smallest throughput over steps left, one linear program (not a
    search over T). Jobs with no steps left get nothing."""
    return max_min(problem, problem.throughputs_over(problem.remaining_steps))
