"""How long each Gavel policy takes to solve, against the number of active jobs.

With HiGHS, and the same linear programs in cvxpy with ECOS, as Gavel solves them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import cvxpy as cp
import numpy as np
import scipy.sparse as sparse
from scipy.optimize import Bounds

from gavel.workload import poisson_jobs
from tether.model.accelerator import ThroughputProfile
from tether.taskcontrol.appsched.gavel.policies import lp
from tether.taskcontrol.appsched.gavel.policies.registry import POLICIES
from tether.taskcontrol.appsched.gavel.problem import F64, AcceleratorJob, Problem

ENTITIES = {"org-a": 1.0, "org-b": 2.0, "org-c": 3.0, "org-d": 4.0}
"""The hierarchical policy's entities and their weights."""
CVXPY_SOLVER = "ECOS"
Program = tuple[F64, sparse.csr_array, F64, Bounds, bool]


@dataclass(frozen=True, slots=True)
class Timing:
    policy: str
    jobs: int
    highs_s: float
    programs: int
    """Linear programs the policy solved (bisection and water-filling solve several)."""
    cvxpy_s: float | None
    """The same programs in cvxpy; None where not measured."""


def problem_of(profile: ThroughputProfile, jobs: int, counts: dict[str, int], seed: int) -> Problem:
    """`jobs` active jobs drawn as the continuous workload draws them, part way through."""
    rng = np.random.default_rng(seed)
    drawn = poisson_jobs(profile, jobs_per_hour=1.0, count=jobs, seed=seed)
    entities = list(ENTITIES)
    active = [
        AcceleratorJob(
            name=job.name,
            scale_factor=job.scale_factor,
            throughputs=profile.throughputs(job.job_type, job.scale_factor),
            weight=float(rng.choice([1.0, 2.0])),
            remaining_steps=job.total_steps * rng.uniform(0.1, 1.0),
            elapsed_s=float(rng.uniform(0, 86_400)),
            entity=entities[number % len(entities)],
        )
        for number, job in enumerate(drawn)
    ]
    return Problem.of(active, counts, ENTITIES)


@contextlib.contextmanager
def recording() -> Iterator[list[Program]]:
    """Records every program the policies hand to HiGHS (`lp.Solver.run`) while they run."""
    seen: list[Program] = []
    run = lp.Solver.run

    def record(self: lp.Solver, *, central: bool = False) -> F64:
        bounds = Bounds(self.lower.copy(), self.upper.copy())
        seen.append((self.objective.copy(), self.rows, self.caps, bounds, central))
        return run(self, central=central)

    lp.Solver.run = record  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        lp.Solver.run = run  # type: ignore[method-assign]


def solve_in_cvxpy(program: Program) -> float:
    """Seconds cvxpy takes to build and solve one recorded program (what Gavel pays per LP)."""
    objective, rows, caps, bounds, _ = program
    started = time.perf_counter()
    x = cp.Variable(objective.size)
    lower, upper = np.asarray(bounds.lb), np.asarray(bounds.ub)
    constraints = [cp.Constant(rows) @ x <= caps]
    finite_low, finite_high = np.isfinite(lower), np.isfinite(upper)
    if finite_low.any():
        constraints.append(x[np.flatnonzero(finite_low)] >= lower[finite_low])
    if finite_high.any():
        constraints.append(x[np.flatnonzero(finite_high)] <= upper[finite_high])
    program = cp.Problem(cp.Minimize(objective @ x), constraints)
    program.solve(solver=CVXPY_SOLVER)  # type: ignore[no-untyped-call]  # cvxpy leaves it so
    return time.perf_counter() - started


def time_policy(name: str, problem: Problem, *, with_cvxpy: bool, repeats: int = 3) -> Timing:
    """The best of `repeats` solves of policy `name` (the machine is shared and noisy), and
    once more each of its programs in cvxpy."""
    policy: Callable[[Problem], F64] = POLICIES[name]
    best = float("inf")
    for _ in range(repeats):
        with recording() as programs:
            started = time.perf_counter()
            policy(problem)
            best = min(best, time.perf_counter() - started)
    cvxpy_s = sum(solve_in_cvxpy(program) for program in programs) if with_cvxpy else None
    return Timing(name, len(problem.jobs), best, len(programs), cvxpy_s)
