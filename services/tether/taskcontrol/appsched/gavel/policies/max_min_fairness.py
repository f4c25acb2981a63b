"""Max-min fairness (Gavel's least attained service): blind to accelerator types, and aware of
them (`max_min_fairness_perf`)."""

from __future__ import annotations

from tether.taskcontrol.appsched.gavel.policies.lp import max_min
from tether.taskcontrol.appsched.gavel.problem import Allocation, Problem


def agnostic(problem: Problem) -> Allocation:
    """Every accelerator counts as equally fast: the smallest weighted accelerator time of any
    job (time fraction times scale factor, over its weight) is as large as it can be. Which
    type the time is on is all one to it: the central optimum, not a vertex (`lp.solve`)."""
    per_job = problem.scale_factors / problem.weights
    return max_min(problem, problem.runnable() * per_job[:, None], central=True)


def heterogeneity_aware(problem: Problem) -> Allocation:
    """The smallest weighted throughput of any job, relative to its throughput under the
    heterogeneity-blind equal share (`Problem.equal_share`), is as large as it can be: each job
    runs where it is fast relative to the others. As in Gavel, the objective also counts a
    job's scale factor, as the blind policy does."""
    per_job = problem.scale_factors / problem.weights
    return max_min(problem, problem.relative_to_equal_share() * per_job[:, None])
