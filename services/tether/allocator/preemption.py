"""Whether a preemption would let the preempting job's tasks be placed: the planner run on the
index as it would be without the preempted tasks (read-only: nothing is placed or released)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tether.allocator.cache import ChoiceCache
from tether.allocator.index import NONE, AllocationIndex
from tether.allocator.index.tasks import entitlement_of
from tether.allocator.placement import Planner, Released
from tether.model import Entitlement, Job

Stopped = Sequence[tuple[str, int]]
"""(job handle, first task index stopped): the job's tasks from that index on stop."""


@dataclass(frozen=True, slots=True)
class PreemptionFit:
    """The answer of `check_preemption`."""

    fits: bool
    spare_needed: int
    """How many of the spare tasks must stop too (0 when the victims are enough)."""
    reason: str
    """Why the tasks fit nowhere even with every victim and spare stopped ("" if they fit)."""


def check_preemption(
    index: AllocationIndex,
    cache: ChoiceCache,
    job: Job,
    entitlement: Entitlement,
    indexes: Sequence[int],
    victims: Stopped,
    spare: Stopped = (),
) -> PreemptionFit:
    """Whether every task of `indexes` of `job` finds a machine once the `victims` stop, and if
    not, how few of the `spare` (taken in order) must stop too.

    Fitting only grows as more tasks stop, so the fewest spare are found by bisection: a few
    plans, each as costly as a Place of the tasks.
    """
    held = index.held(job.handle)
    wanted = [task for task in indexes if task not in held]

    def unplaced(count: int) -> dict[int, str]:
        stopped = _merged([*victims, *spare[:count]])
        released = released_by(index, entitlement, stopped)
        planner = Planner(index, cache, job, entitlement, released)
        return planner.choose(wanted, held).unplaced

    missing = unplaced(0)
    if not missing:
        return PreemptionFit(True, 0, "")
    if spare:
        missing = unplaced(len(spare))
    if missing:
        return PreemptionFit(False, 0, next(iter(missing.values())))
    low, high = 1, len(spare)  # the fewest spare that fit lie in [low, high]
    while low < high:
        middle = (low + high) // 2
        if unplaced(middle):
            low = middle + 1
        else:
            high = middle
    return PreemptionFit(True, low, "")


def released_by(
    index: AllocationIndex, entitlement: Entitlement, stopped: Mapping[str, int]
) -> Released:
    """The index as stopping the tasks would leave it, seen by a job of `entitlement`."""
    mine = {job: first for job, first in stopped.items() if entitlement_of(job) == entitlement.name}
    theirs = {job: first for job, first in stopped.items() if job not in mine}
    own = index.held_from(mine)
    # A machine holds tasks of its owner's jobs only: the two sets of rows do not meet.
    freed = index.held_from(theirs) | own
    owner = index.owners.code(entitlement.name)
    vacated = frozenset(
        row
        for row, (_, tasks) in freed.items()
        if int(index.task_count[row]) == tasks and int(index.owner[row]) not in (NONE, owner)
    )
    credit = np.zeros(len(index.dimensions), np.int64)
    for amount, _ in own.values():
        credit += amount
    return Released({row: amount for row, (amount, _) in freed.items()}, vacated, credit)


def _merged(stopped: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Job -> the lowest first index stopped any entry names."""
    merged: dict[str, int] = {}
    for job, first in stopped:
        merged[job] = min(first, merged.get(job, first))
    return merged
