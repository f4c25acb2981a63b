"""Water-filling (progressive filling): every job's value rises together; the jobs that cannot
rise further are frozen at the throughput they reached, and the others go on, until every job
is frozen. Max-min fairness that does not stop at the first bottleneck."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sparse
from scipy.optimize import Bounds

from tether.taskcontrol.appsched.gavel.policies.lp import (
    MARGIN,
    Kinds,
    highest_floor,
    most_value,
    per_job,
    per_row,
    solve,
)
from tether.taskcontrol.appsched.gavel.problem import F64, Allocation, Problem

Mask = npt.NDArray[np.bool_]

_RISE = 1e-3
"""How far (relative to the level) a job must be able to rise above it not to be frozen."""
_FLOOR_SLACK = 1e-6
"""What a frozen job's floor row gives up of the throughput it froze at, relative and absolute.
The allocation it froze in is the solver's, feasible only within the solver's tolerance (1e-7 on
each row): floors held exactly to it can be just out of reach together."""


def water_fill(problem: Problem, values: Callable[[Mask], F64]) -> Allocation:
    """`values(rising)`: per job and type, what a unit of time is worth to each job still
    rising. A frozen job keeps at least the throughput it had when it froze; at the end the
    accelerators left are handed out by throughput relative to each job's fastest type."""
    if not problem.jobs:
        return np.zeros(problem.shape)
    usable = problem.runnable() & (problem.counts > 0)
    rising: Mask = np.asarray(usable.any(axis=1))
    floors = np.zeros(len(problem.jobs))
    while rising.any():
        step = _Step.of(problem, values(rising) * rising[:, None], rising, floors)
        level = step.level()
        allocation, stuck = step.stuck(level)
        if not stuck.any():
            stuck = rising  # rounding: nobody can be shown to rise; freeze them all
        floors[stuck] = problem.effective_throughputs(allocation)[stuck]
        rising &= ~stuck
    finished = np.zeros(len(problem.jobs), bool)
    return _Step.of(problem, problem.relative_to_fastest(), finished, floors).most()


@dataclass(frozen=True, slots=True)
class _Step:
    """One round's programs over the kinds of jobs: the rising ones' values, the frozen ones'
    floors on their throughput."""

    kinds: Kinds
    rows: sparse.csr_array
    caps: F64
    rising: npt.NDArray[np.intp]
    """The kinds still rising."""

    @classmethod
    def of(cls, problem: Problem, values: F64, rising: Mask, floors: F64) -> _Step:
        kinds = Kinds.of(
            problem,
            values,
            np.column_stack([problem.throughputs, floors, rising]),
        )
        types = len(problem.accelerators)
        rates, kind_floors = kinds.extra[:, :types], kinds.extra[:, types]
        frozen = np.flatnonzero(kind_floors > 0)
        base, caps = kinds.constraints(problem)
        # A frozen kind keeps its throughput: -sum_t rate x <= -floor.
        rows = sparse.vstack([base, -per_row(rates)[frozen]]).tocsr()
        kept = kind_floors[frozen] * (1 - _FLOOR_SLACK) - _FLOOR_SLACK
        caps = np.concatenate([caps, -kept])
        return cls(kinds, rows, caps, np.flatnonzero(kinds.extra[:, -1] > 0))

    def level(self) -> float:
        """The largest value every rising kind reaches at once."""
        values = per_row(self.kinds.coefficients)[self.rising]
        return highest_floor(self.kinds, self.rows, self.caps, values)

    def stuck(self, level: float) -> tuple[Allocation, Mask]:
        """An allocation with every rising kind at `level`, as many as can be a little above
        it; and per job, whether it cannot rise (its kind stays at `level`). Rising a little,
        not as much as it can: the most in all could take one kind's surplus from another."""
        size, count = self.kinds.upper.size, len(self.rising)
        rise = _RISE * max(level, 1e-12)
        values = per_row(self.kinds.coefficients)[self.rising]
        # One slack s per rising kind, value - s >= level, 0 <= s <= rise: maximize the slacks.
        rows = sparse.vstack(
            [
                sparse.hstack([self.rows, sparse.csr_array((self.rows.shape[0], count))]),
                sparse.hstack([-values, sparse.eye_array(count, format="csr")]),
            ]
        ).tocsr()
        objective = np.concatenate([np.zeros(size), -self.kinds.members[self.rising]])
        solution = solve(
            objective,
            rows,
            np.concatenate([self.caps, np.full(count, -level * (1 - MARGIN))]),
            Bounds(
                np.zeros(size + count),
                np.concatenate([self.kinds.upper.reshape(-1), np.full(count, rise)]),
            ),
        )
        stuck_kinds = np.zeros(len(self.kinds.members), bool)
        stuck_kinds[self.rising] = solution[size:] < rise / 2
        return per_job(self.kinds, solution), stuck_kinds[self.kinds.of_job]

    def most(self) -> Allocation:
        """Every frozen kind at its floor, the most value in all."""
        return per_job(self.kinds, most_value(self.kinds, self.rows, self.caps))
