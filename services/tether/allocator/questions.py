"""The allocator's read-only requests: Suggest, Explain, CheckPreemption and EphemeralState,
answered from the index without writing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tether.allocator.cache import ChoiceCache
from tether.allocator.ephemeral import LabelState, label_state
from tether.allocator.explain import Explanation, explain
from tether.allocator.group_commit import CaughtUp, catch_up
from tether.allocator.index import AllocationIndex
from tether.allocator.placement import Planner, Released
from tether.allocator.preemption import (
    PreemptionCandidate,
    PreemptionChoice,
    choose_preemption,
)
from tether.allocator.requests import JobReader, check_in_range, check_unique, parse_handle
from tether.model import Entitlement, Job
from tether.model.ephemeral import EphemeralResource


@dataclass(frozen=True, slots=True)
class Suggestion:
    """Where tasks would go if placed anew (task index -> machine id), and why the others
    would go nowhere."""

    machines: dict[int, str]
    unplaced: dict[int, str]


def suggest(
    index: AllocationIndex,
    cache: ChoiceCache,
    job: Job,
    entitlement: Entitlement,
    indexes: Sequence[int],
) -> Suggestion:
    """Where the tasks `indexes` of the job would go if placed anew on `index` now: planned as
    one more batch of the job, its other tasks where they are (pure)."""
    held = index.held(job.handle)
    moving = set(indexes)
    others = {task: row for task, row in held.items() if task not in moving}
    # The moving tasks still hold their machines, but not the quota twice: what they hold is
    # the entitlement's again for the plan.
    own = index.vector(job.spec.task.resources) * sum(1 for task in moving if task in held)
    released = Released({}, frozenset(), own)
    choice = Planner(index, cache, job, entitlement, released).choose(indexes, others)
    return Suggestion(
        {task: index.ids[row] for task, row in choice.placements.items()}, choice.unplaced
    )


class Questions:
    """Answers the read-only requests of one replica over its index."""

    def __init__(
        self, index: AllocationIndex, cache: ChoiceCache, jobs: JobReader, caught_up: CaughtUp
    ) -> None:
        """`caught_up(revision)` returns once the index holds every allocation record change
        up to `revision`."""
        self._index = index
        self._cache = cache
        self._jobs = jobs
        self._caught_up = caught_up

    async def suggest(self, job_handle: str, indexes: Sequence[int]) -> Suggestion:
        """Where the tasks `indexes` of the job would go if placed anew now: each as one more
        task of the job, its other tasks where they are."""
        check_unique(indexes)
        job = await self._jobs.job(job_handle)
        check_in_range(job, indexes)
        entitlement = await self._jobs.entitlement(job)
        return suggest(self._index, self._cache, job, entitlement, indexes)

    async def explain(self, job_handle: str) -> Explanation:
        """Why one more task of the job would go where it would, or why it cannot go anywhere."""
        job = await self._jobs.job(job_handle)
        entitlement = await self._jobs.entitlement(job)
        return explain(Planner(self._index, self._cache, job, entitlement))

    async def check_preemption(
        self,
        job_handle: str,
        indexes: Sequence[int],
        candidates: Sequence[PreemptionCandidate],
        budget: int,
    ) -> PreemptionChoice:
        """Which candidates must stop for the job's tasks `indexes` to be placed, at most
        `budget` tasks stopped (`preemption.choose_preemption`)."""
        check_unique(indexes)
        for candidate in candidates:
            parse_handle(candidate.job)
        job = await self._jobs.job(job_handle)
        check_in_range(job, indexes)
        entitlement = await self._jobs.entitlement(job)
        return choose_preemption(
            self._index, self._cache, job, entitlement, indexes, candidates, budget
        )

    async def ephemeral_state(
        self,
        entitlement: str,
        records: Sequence[EphemeralResource],
        *,
        over_held: bool,
        min_revision: int,
        limit: int,
    ) -> list[LabelState]:
        """Per record, its machines' capacity and what the entitlement's tasks hold there
        (`ephemeral.label_state`), once the index shows allocations up to `min_revision`."""
        if min_revision:
            await catch_up(self._caught_up, min_revision)
        return [
            label_state(
                self._index, entitlement, record.label, record, over_held=over_held, limit=limit
            )
            for record in records
        ]
