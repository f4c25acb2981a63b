"""Gavel's round-based mechanism: which jobs run next round, and on which accelerator type.

Over rounds, each job's share of time on each type approaches the policy's allocation."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tether.taskcontrol.appsched.gavel.problem import Allocation, Problem

Shares = dict[str, dict[str, float]]
"""Job -> accelerator type -> a fraction of time (or seconds)."""


def shares_of(problem: Problem, allocation: Allocation) -> Shares:
    """The allocation matrix by job and type name, leaving out what is zero."""
    return {
        job: {
            kind: float(fraction)
            for kind, fraction in zip(problem.accelerators, row, strict=True)
            if fraction > 0
        }
        for job, row in zip(problem.jobs, allocation, strict=True)
    }


@dataclass
class Ledger:
    """Seconds each job ran on each type since the allocation last changed, the seconds since,
    and what each job was owed when it changed."""

    allocation: Shares = field(default_factory=dict)
    received: Shares = field(default_factory=dict)
    carried: Shares = field(default_factory=dict)
    """Time owed (allocated minus received) under earlier allocations: a job that fell behind
    goes first among equals."""
    elapsed_s: float = 0.0

    def reset(self, allocation: Shares) -> None:
        """Measures shares against `allocation` from now on; jobs it does not name are
        forgotten."""
        carried: Shares = {}
        for job in allocation:
            owed = self.carried.get(job, {})
            for kind in set(owed) | set(self.allocation.get(job, {})):
                owed_now = self.deficit(job, kind)
                if owed_now:
                    carried.setdefault(job, {})[kind] = owed_now
        self.allocation, self.carried, self.received = allocation, carried, {}
        self.elapsed_s = 0.0

    def record(self, ran: Mapping[str, str], seconds: float) -> None:
        """Jobs ran `seconds` on the types `ran` names (job -> type)."""
        for job, kind in ran.items():
            got = self.received.setdefault(job, {})
            got[kind] = got.get(kind, 0.0) + seconds
        self.elapsed_s += seconds

    def fraction(self, job: str, kind: str) -> float:
        return self.allocation.get(job, {}).get(kind, 0.0)

    def share(self, job: str, kind: str) -> float:
        """The fraction of the time since the allocation changed that `job` ran on `kind`."""
        if self.elapsed_s <= 0:
            return 0.0
        return self.received.get(job, {}).get(kind, 0.0) / self.elapsed_s

    def behind(self, job: str) -> float:
        """`priority` on all the types the allocation gives `job` time on together (time on
        others, leftovers, does not count)."""
        kinds = self.allocation.get(job, {})
        return _ratio(sum(kinds.values()), sum(self.share(job, kind) for kind in kinds))

    def deficit(self, job: str, kind: str) -> float:
        """Seconds on `kind` the allocations owe `job`, now and before."""
        owed = self.fraction(job, kind) * self.elapsed_s
        got = self.received.get(job, {}).get(kind, 0.0)
        return self.carried.get(job, {}).get(kind, 0.0) + owed - got

    def priority(self, job: str, kind: str) -> float:
        """The allocated fraction over the share received: above 1, the job is behind."""
        return _ratio(self.fraction(job, kind), self.share(job, kind))


def _make_room(
    problem: Problem,
    runs: npt.NDArray[np.bool_],
    ledger: Ledger,
    chosen: dict[str, str],
    free: dict[str, float],
    on_type: dict[str, list[int]],
    kind: str,
    gang: float,
) -> None:
    """Moves jobs chosen on `kind` (`on_type`: the indexes of the jobs chosen on each type) to
    another type their allocation gives them time on, that has room and on which they are as
    far behind, until `kind` has `gang` accelerators free (or no move is left)."""
    for index in sorted(on_type[kind]):
        if free[kind] >= gang:
            return
        job, size = problem.jobs[index], float(problem.scale_factors[index])
        for column, other in enumerate(problem.accelerators):
            if (
                other != kind
                and free[other] >= size
                and runs[index, column]
                and ledger.fraction(job, other) > 0
                and ledger.priority(job, other) >= ledger.priority(job, kind)
            ):
                chosen[job] = other
                free[other] -= size
                free[kind] += size
                on_type[kind].remove(index)
                on_type[other].append(index)
                break


def _ratio(fraction: float, share: float) -> float:
    """Allocated over received: 0 for nothing allocated, infinite for nothing received."""
    if fraction <= 0:
        return 0.0
    return fraction / share if share > 0 else math.inf


def choose(problem: Problem, ledger: Ledger, previous: Mapping[str, str]) -> dict[str, str]:
    """Job -> the accelerator type it runs on next round.

    Jobs take the (job, type) pairs of the allocation in order of priority (`Ledger.priority`),
    then of time owed, then of the job's priority on all its types (`Ledger.behind`: a job
    that ran elsewhere does not go before one that never ran), then staying where they ran last
    round, then age; a pair is skipped
    when the job already runs or the type has not room for its whole gang, so smaller jobs fill
    behind a gang that does not fit. Accelerators still free then go to the jobs left, oldest
    first, each on the type with room the allocation gives it most time on (else the one with
    most free): no accelerator idles while a job that fits waits.
    """
    free = dict(zip(problem.accelerators, problem.counts.tolist(), strict=True))
    runs = problem.runnable()
    owed: list[tuple[tuple[float, float, float, bool, int], str, int]] = []
    for index, job in enumerate(problem.jobs):
        behind = ledger.behind(job)
        for column, kind in enumerate(problem.accelerators):
            if runs[index, column] and ledger.fraction(job, kind) > 0:
                rank = (
                    ledger.priority(job, kind),
                    ledger.deficit(job, kind),
                    behind,
                    previous.get(job) == kind,
                    -index,
                )
                owed.append((rank, kind, index))
    owed.sort(key=lambda entry: entry[0], reverse=True)
    chosen: dict[str, str] = {}
    on_type: dict[str, list[int]] = {kind: [] for kind in problem.accelerators}  # job indexes

    def take(index: int, kind: str) -> bool:
        job, gang = problem.jobs[index], float(problem.scale_factors[index])
        if job in chosen or free[kind] < gang:
            return False
        chosen[job] = kind
        free[kind] -= gang
        on_type[kind].append(index)
        return True

    for _, kind, index in owed:
        take(index, kind)
    # Greedy order can strand a job whose allocated types the jobs before it took, when one
    # of those could have run on another type of its own allocation: move it there (one step
    # of an augmenting path), so that a round runs as much of the allocation as fits.
    for _, kind, index in owed:
        gang = float(problem.scale_factors[index])
        if problem.jobs[index] in chosen or free[kind] >= gang:
            continue
        # Nowhere to move a job to: the common case in a full cluster.
        if not any(room > 0 for other, room in free.items() if other != kind):
            continue
        _make_room(problem, runs, ledger, chosen, free, on_type, kind, gang)
        take(index, kind)
    for index, job in enumerate(problem.jobs):
        if job in chosen:
            continue
        # The mechanism knows no more of speeds than the policy used: a leftover goes where
        # the allocation gives the job most time, else where most accelerators are free.
        kinds = [kind for column, kind in enumerate(problem.accelerators) if runs[index, column]]
        kinds.sort(key=lambda kind: (ledger.fraction(job, kind), free[kind]), reverse=True)
        for kind in kinds:
            if take(index, kind):
                break
    return chosen
