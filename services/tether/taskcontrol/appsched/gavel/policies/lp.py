"""The linear programs the policies share, solved with HiGHS through highspy, its own binding.

The variables are the time fractions of each job on each type, bounded to [0, 1] where the
job can run and to 0 where it cannot; every job runs at most all the time, and no type gives
more accelerators than it has.

Jobs alike in everything a program reads (their coefficients, scale factor and where they can
run) share one row: by symmetry some optimal allocation gives alike jobs alike rows (averaging
an optimal one over them keeps it feasible and optimal), so a program's size follows the kinds
of jobs, not their number."""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numpy as np
import numpy.typing as npt
import scipy.sparse as sparse
from scipy.optimize import Bounds

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
    """Divided by `scale`: the largest is 1. Coefficients near the solver's tolerances (a
    makespan's throughput over steps left is about 1e-6) would be solved to their noise."""
    scale: float
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
        scale = float(np.abs(unique[:, :types]).max(initial=0.0)) or 1.0
        return cls(
            coefficients=unique[:, :types] / scale,
            scale=scale,
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


def max_min(problem: Problem, coefficients: F64, *, central: bool = False) -> Allocation:
    """The allocation that maximizes the smallest `sum_t coefficients[j, t] * x[j, t]` over the
    jobs that can run on some accelerator there is; then, keeping every such job at that
    minimum at least, the sum of them. The minimum alone leaves the jobs above it wherever the
    solver happens to stop, accelerators idle among them; the second program hands out what
    the first left. `central`: see `Solver.run`."""
    program = _MaxMin.of(problem, coefficients)
    if program is None:
        return np.zeros(problem.shape)
    kinds, solver = program.kinds, program.solver()
    floor = float(solver.run()[-1])
    # The second program is the first with the floor fixed (less a rounding margin): its rows
    # `floor - value <= 0` keep every job at the minimum, and the solver starts from the
    # first's basis.
    solver.set_bounds(kinds.upper.size, floor * (1 - MARGIN), floor * (1 - MARGIN))
    solver.set_objective(np.append(-(kinds.coefficients * kinds.members[:, None]).reshape(-1), 0))
    return per_job(kinds, solver.run(central=central))


def max_min_value(problem: Problem, coefficients: F64) -> float:
    """The largest smallest `sum_t coefficients[j, t] * x[j, t]` (0 when no job can run)."""
    program = _MaxMin.of(problem, coefficients)
    if program is None:
        return 0.0
    return float(program.solver().run()[-1]) * program.kinds.scale


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

    def solver(self) -> Solver:
        """The highest floor's program, its last variable the floor (`highest_floor`)."""
        return floor_solver(self.kinds, self.rows, self.caps, self.values)


def max_sum(problem: Problem, coefficients: F64) -> Allocation:
    """The allocation that maximizes `sum_j sum_t coefficients[j, t] * x[j, t]`."""
    kinds = Kinds.of(problem, coefficients * problem.runnable())
    if not len(kinds.members):
        return np.zeros(problem.shape)
    rows, caps = kinds.constraints(problem)
    return per_job(kinds, most_value(kinds, rows, caps))


def most_value(kinds: Kinds, rows: sparse.csr_array, caps: F64, *, central: bool = False) -> F64:
    """The variables with `rows @ x <= caps` that maximize the kinds' values summed over all
    their jobs."""
    objective = -(kinds.coefficients * kinds.members[:, None]).reshape(-1)
    bounds = Bounds(np.zeros(kinds.upper.size), kinds.upper.reshape(-1))
    return solve(objective, rows, caps, bounds, central=central)


def highest_floor(
    kinds: Kinds, rows: sparse.csr_array, caps: F64, values: sparse.csr_array
) -> float:
    """The largest z that every row of `values` (a kind's value over its variables) reaches at
    once with `rows @ x <= caps`."""
    return float(floor_solver(kinds, rows, caps, values).run()[-1])


def floor_solver(
    kinds: Kinds, rows: sparse.csr_array, caps: F64, values: sparse.csr_array
) -> Solver:
    """`highest_floor`'s program: one more variable z, the last, with z - value <= 0 per row of
    `values`, maximized."""
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
    return Solver(objective, program, np.concatenate([caps, np.zeros(count)]), bounds)


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


def solve(
    objective: F64, rows: sparse.csr_array, caps: F64, bounds: Bounds, *, central: bool = False
) -> F64:
    """Minimizes `objective` with `rows @ x <= caps` within `bounds` (`Solver.run`)."""
    return Solver(objective, rows, caps, bounds).run(central=central)


class Solver:
    """One program in HiGHS: solved, then changed (its objective, a variable's bounds) and
    solved again from the basis the last run left. It keeps the program as it stands
    (`objective`, `rows`, `caps`, `lower`, `upper`) for whoever compares solvers on it."""

    def __init__(self, objective: F64, rows: sparse.csr_array, caps: F64, bounds: Bounds) -> None:
        self.objective, self.rows, self.caps = objective.copy(), rows, caps
        self.lower = np.asarray(bounds.lb, dtype=np.float64).copy()
        self.upper = np.asarray(bounds.ub, dtype=np.float64).copy()
        # The bare binding highspy exports: its `Highs` wrapper sets up callbacks, which print
        # HiGHS's banner on stdout whatever the options say.
        self._highs = highs = highspy._Highs()  # type: ignore[attr-defined]  # not in its stubs
        highs.setOptionValue("output_flag", False)
        model = highspy.HighsLp()
        model.num_col_, model.num_row_ = objective.size, rows.shape[0]
        model.col_cost_ = self.objective
        model.col_lower_ = self.lower
        model.col_upper_ = self.upper
        model.row_lower_ = np.full(rows.shape[0], -highspy.kHighsInf)
        model.row_upper_ = caps
        columns = sparse.csc_array(rows)
        model.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        model.a_matrix_.start_ = columns.indptr
        model.a_matrix_.index_ = columns.indices
        model.a_matrix_.value_ = columns.data
        highs.passModel(model)

    def set_objective(self, objective: F64) -> None:
        self.objective = objective.copy()
        self._highs.changeColsCost(objective.size, np.arange(objective.size), self.objective)

    def set_bounds(self, column: int, lower: float, upper: float) -> None:
        self.lower[column], self.upper[column] = lower, upper
        self._highs.changeColBounds(column, lower, upper)

    def run(self, *, central: bool = False) -> F64:
        """Minimizes the objective: by the simplex method, an optimal vertex. `central`: by the
        interior-point method without crossover, an optimum in the middle of the optimal ones.
        A policy blind to accelerator types finds many allocations equally good that differ
        only in where jobs run; a vertex among them puts jobs wholly on one type or another by
        an accident of pivoting (and Gavel's interior-point solver returns the middle one).
        Should the interior-point method stop short of an optimum it can vouch for, the
        simplex method's vertex it is. A run from the last one's basis can end without a
        verdict (HiGHS's "Unknown", met once in a long simulation); the program is then solved
        again from scratch."""
        highs, optimal = self._highs, highspy.HighsModelStatus.kOptimal
        status = self._solve(central)
        if status != optimal and central:
            status = self._solve(False)
        if status != optimal:
            highs.clearSolver()
            status = self._solve(False)
        if status != optimal:
            raise NoSolution(
                f"HiGHS found no optimal allocation: {highs.modelStatusToString(status)}"
            )
        solution: F64 = np.clip(np.asarray(highs.getSolution().col_value), 0.0, None)
        return solution

    def _solve(self, central: bool) -> highspy.HighsModelStatus:
        highs = self._highs
        highs.setOptionValue("solver", "ipm" if central else "simplex")
        highs.setOptionValue("run_crossover", "off" if central else "on")
        # Presolve may settle the program itself, at a vertex.
        highs.setOptionValue("presolve", "off" if central else "choose")
        highs.run()
        status: highspy.HighsModelStatus = highs.getModelStatus()
        return status
