"""The linear programs the policies share, solved with HiGHS (scipy.optimize.milp with no
integer variables, which takes sparse constraints): the variables are the time fractions of
each job on each type, bounded to [0, 1] where the job can run and to 0 where it cannot; every
job runs at most all the time, and no type gives more accelerators than it has.

Jobs alike in everything a program reads (their coefficients, scale factor and where they can
run) share one row: by symmetry some optimal allocation gives alike jobs alike rows (averaging
an optimal one over them keeps it feasible and optimal), so a program's size follows the kinds
of jobs, not their number."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from tether.taskcontrol.appsched.gavel.problem import F64, Allocation, Problem

MARGIN = 1e-7
"""Relative slack on the minimum the second program keeps: the first's optimum, exactly, can
be just out of the second's reach in floating point."""


class NoSolution(RuntimeError):
    """The solver found no optimal allocation (a bug: the zero allocation is always feasible)."""


@dataclass(frozen=True, slots=True)
class Kinds:
    """The problem's jobs grouped by what the program reads of them, one row per kind."""

    coefficients: F64
    upper: F64
    """1 where the kind can run, else 0."""
    accelerators: F64
    """Per kind, the accelerators a time fraction of 1 takes: scale factor times members."""
    members: F64
    of_job: npt.NDArray[np.intp]
    """Per job, its kind."""
    extra: F64
    """Per kind, the `extra` columns its jobs were grouped by too."""

    @classmethod
    def of(cls, problem: Problem, coefficients: F64, extra: F64 | None = None) -> Kinds:
        """Jobs alike in `coefficients`, where they can run, scale factor and `extra` (more
        columns per job that a program reads)."""
        types = len(problem.accelerators)
        more = np.zeros((len(problem.jobs), 0)) if extra is None else extra
        keys = np.column_stack([coefficients, problem.runnable(), problem.scale_factors, more])
        unique, of_job, members = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        return cls(
            coefficients=unique[:, :types],
            upper=unique[:, types : 2 * types],
            accelerators=unique[:, 2 * types] * members,
            members=members.astype(np.float64),
            of_job=of_job.reshape(-1),
            extra=unique[:, 2 * types + 1 :],
        )

    def constraints(self, problem: Problem) -> tuple[sparse.csr_array, F64]:
        """Each kind's row sums to at most 1, each type's accelerators to at most its count."""
        kinds, types = self.coefficients.shape
        per_type = sparse.csr_array(
            (
                np.repeat(self.accelerators, types),
                (np.tile(np.arange(types), kinds), np.arange(kinds * types)),
            ),
            shape=(types, kinds * types),
        )
        rows = sparse.vstack([per_row(np.ones((kinds, types))), per_type]).tocsr()
        return rows, np.concatenate([np.ones(kinds), problem.counts])


def max_min(problem: Problem, coefficients: F64) -> Allocation:
    """The allocation that maximizes the smallest `sum_t coefficients[j, t] * x[j, t]` over the
    jobs that can run on some accelerator there is; then, keeping every such job at that
    minimum at least, the sum of them. The minimum alone leaves the jobs above it wherever the
    solver happens to stop, accelerators idle among them; the second program hands out what
    the first left."""
    program = _MaxMin.of(problem, coefficients)
    if program is None:
        return np.zeros(problem.shape)
    kinds, values = program.kinds, program.values
    # Every job kept at the minimum (less a rounding margin).
    least = program.minimum() * (1 - MARGIN)
    rows = sparse.vstack([program.rows, -values]).tocsr()
    caps = np.concatenate([program.caps, np.full(values.shape[0], -least)])
    return per_job(kinds, most_value(kinds, rows, caps))


def max_min_value(problem: Problem, coefficients: F64) -> float:
    """The largest smallest `sum_t coefficients[j, t] * x[j, t]` (0 when no job can run)."""
    program = _MaxMin.of(problem, coefficients)
    return 0.0 if program is None else program.minimum()


@dataclass(frozen=True, slots=True)
class _MaxMin:
    """A max-min program over the kinds of jobs that can run on some accelerator there is."""

    kinds: Kinds
    rows: sparse.csr_array
    caps: F64
    values: sparse.csr_array
    """One row per counted kind: its objective over its variables."""

    @classmethod
    def of(cls, problem: Problem, coefficients: F64) -> _MaxMin | None:
        usable = coefficients * problem.runnable() * (problem.counts > 0)
        kinds = Kinds.of(problem, usable)
        counted = np.flatnonzero(kinds.coefficients.sum(axis=1) > 0)
        if not len(counted):
            return None
        rows, caps = kinds.constraints(problem)
        return cls(kinds, rows, caps, per_row(kinds.coefficients)[counted])

    def minimum(self) -> float:
        return highest_floor(self.kinds, self.rows, self.caps, self.values)


def max_sum(problem: Problem, coefficients: F64) -> Allocation:
    """The allocation that maximizes `sum_j sum_t coefficients[j, t] * x[j, t]`."""
    kinds = Kinds.of(problem, coefficients * problem.runnable())
    if not len(kinds.members):
        return np.zeros(problem.shape)
    rows, caps = kinds.constraints(problem)
    return per_job(kinds, most_value(kinds, rows, caps))


def most_value(kinds: Kinds, rows: sparse.csr_array, caps: F64) -> F64:
    """The variables with `rows @ x <= caps` that maximize the kinds' values summed over all
    their jobs."""
    objective = -(kinds.coefficients * kinds.members[:, None]).reshape(-1)
    return solve(objective, rows, caps, Bounds(np.zeros(kinds.upper.size), kinds.upper.reshape(-1)))


def highest_floor(
    kinds: Kinds, rows: sparse.csr_array, caps: F64, values: sparse.csr_array
) -> float:
    """The largest z that every row of `values` (a kind's value over its variables) reaches at
    once with `rows @ x <= caps`: one more variable z, with z - value <= 0 per row."""
    size, count = kinds.upper.size, values.shape[0]
    program = sparse.vstack(
        [
            sparse.hstack([rows, sparse.csr_array((rows.shape[0], 1))]),
            sparse.hstack([-values, sparse.csr_array(np.ones((count, 1)))]),
        ]
    ).tocsr()
    objective = np.zeros(size + 1)
    objective[-1] = -1.0
    bounds = Bounds(np.append(np.zeros(size), -np.inf), np.append(kinds.upper.reshape(-1), np.inf))
    solution = solve(objective, program, np.concatenate([caps, np.zeros(count)]), bounds)
    return float(solution[-1])


def per_row(values: F64) -> sparse.csr_array:
    """One constraint row per row of `values`, over that row's variables."""
    count, types = values.shape
    return sparse.csr_array(
        (values.reshape(-1), (np.repeat(np.arange(count), types), np.arange(count * types))),
        shape=(count, count * types),
    )


def per_job(kinds: Kinds, solution: F64) -> Allocation:
    rows = solution[: kinds.upper.size].reshape(kinds.upper.shape)
    allocation: Allocation = rows[kinds.of_job]
    return allocation


def solve(objective: F64, rows: sparse.csr_array, caps: F64, bounds: Bounds) -> F64:
    """Minimizes `objective` with `rows @ x <= caps` within `bounds`."""
    constraint = LinearConstraint(rows, -np.inf, caps)
    result = milp(objective, constraints=constraint, bounds=bounds)
    if result.status != 0 or result.x is None:
        raise NoSolution(f"HiGHS found no optimal allocation: {result.message}")
    solution: F64 = np.clip(result.x, 0.0, None)
    return solution
