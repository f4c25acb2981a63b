"""Place, Release and Explain: the allocator's requests over its index and the store."""

from __future__ import annotations

import asyncio
from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from tether.allocator import placement
from tether.allocator.commit import Change, commit
from tether.allocator.errors import (
    CorruptRecord,
    InvalidRequest,
    JobDeleting,
    JobNotFound,
    StaleGeneration,
    TooManyConflicts,
    UnknownEntitlement,
)
from tether.allocator.index import AllocationIndex
from tether.allocator.placement import RuleOutcome
from tether.model import Allocation, AllocationEntry, Entitlement, Job, from_json, parse_job_handle
from tether.store import Store, keys

# Enough for every Place a scheduler may retry: retries follow the first call within seconds.
RESPONSE_MEMORY = 512


@dataclass(frozen=True, slots=True)
class PlaceResult:
    """Placed tasks (index, machine) and unplaced ones (index, reason), in request order."""

    placements: list[tuple[int, str]]
    unplaced: list[tuple[int, str]]
    attempts: int
    conflicts: int


@dataclass(frozen=True, slots=True)
class ExplainResult:
    """Explain's answer: every rule's effect for one more task, and where the tasks are."""

    job_handle: str
    considered: int
    outcomes: list[RuleOutcome]
    chosen: list[tuple[int, str]]
    summary: str


class Engine:
    """Serves the allocator's requests; one per replica.

    Requests that write run one at a time in a replica: concurrent ones would mostly pick the
    same best-fitting machines and lose to each other. Conflicts then come only from other
    replicas.
    """

    def __init__(self, store: Store, index: AllocationIndex, max_attempts: int) -> None:
        self._store = store
        self._index = index
        self._max_attempts = max_attempts
        self._writing = asyncio.Lock()
        self._responses: OrderedDict[str, PlaceResult] = OrderedDict()

    async def place(
        self, job_handle: str, indexes: Sequence[int], generation: int, request_id: str
    ) -> PlaceResult:
        """Places the tasks `indexes` of the job at `generation` and commits the placements."""
        _check_unique(indexes)
        remembered = self._remembered(request_id)
        if remembered is not None:
            return remembered
        job = await self._read_job(job_handle)
        if job.generation != generation:
            raise StaleGeneration(
                f"job {job_handle} is at generation {job.generation} in the store, "
                f"but the request is for generation {generation}"
            )
        if job.deleting:
            raise JobDeleting(f"job {job_handle} is being deleted; its tasks are not placed")
        too_high = [index for index in indexes if index >= job.spec.count]
        if too_high:
            raise InvalidRequest(
                f"task indexes {_listed(too_high)} are out of range: job {job_handle} has "
                f"{job.spec.count} tasks (0 to {job.spec.count - 1})"
            )
        async with self._writing:
            # A retry may have waited for the first call to finish.
            remembered = self._remembered(request_id)
            if remembered is not None:
                return remembered
            entitlement = await self._entitlement(job)
            result = await self._place(job, entitlement, indexes)
        if request_id:
            self._responses[request_id] = result
            while len(self._responses) > RESPONSE_MEMORY:
                self._responses.popitem(last=False)
        return result

    async def release(self, job_handle: str, indexes: Sequence[int]) -> int:
        """Removes tasks of the job (all of them when `indexes` is empty) from their machines."""
        _parse(job_handle)
        _check_unique(indexes)
        async with self._writing:
            for _ in range(self._max_attempts):
                held = self._index.placements(job_handle)
                chosen = held if not indexes else {i: held[i] for i in indexes if i in held}
                if not chosen:
                    return 0
                changes = {}
                for machine_id in set(chosen.values()):
                    record = self._index.record(machine_id)
                    assert record.allocation is not None  # it lists tasks, so it was readable
                    gone = {i for i, m in chosen.items() if m == machine_id}
                    tasks = {
                        task_id: entry
                        for task_id, entry in record.allocation.tasks.items()
                        if not (entry.job == job_handle and entry.index in gone)
                    }
                    changes[machine_id] = Change(
                        record.revision, Allocation(machine=machine_id, tasks=tasks)
                    )
                if await commit(self._store, self._index, changes):
                    return len(chosen)
        raise TooManyConflicts(
            f"releasing tasks of {job_handle} conflicted with other allocators "
            f"{self._max_attempts} times; retry"
        )

    async def explain(self, job_handle: str) -> ExplainResult:
        """Why one more task of the job would go where it would, or why it cannot go anywhere."""
        job = await self._read_job(job_handle)
        entitlement = await self._entitlement(job)
        explanation = placement.explain(
            list(self._index.candidates()), job, entitlement, self._index.usage(entitlement.name)
        )
        return ExplainResult(
            job_handle,
            explanation.considered,
            explanation.outcomes,
            sorted(self._index.placements(job_handle).items()),
            explanation.summary,
        )

    async def _place(
        self, job: Job, entitlement: Entitlement, indexes: Sequence[int]
    ) -> PlaceResult:
        attempts = conflicts = 0
        unplaced: dict[int, str] = {}
        committed: dict[int, str] = {}
        while True:
            held = self._index.placements(job.handle)
            pending = [index for index in indexes if index not in held]
            if not pending:
                break
            if attempts == self._max_attempts:
                unplaced = dict.fromkeys(
                    pending,
                    f"gave up after {attempts} attempts: other allocators kept changing the "
                    "chosen machines; retry later",
                )
                break
            choice = placement.choose(
                list(self._index.candidates()),
                job,
                entitlement,
                self._index.usage(entitlement.name),
                pending,
                held,
            )
            unplaced = choice.unplaced
            if not choice.placements:
                break
            attempts += 1
            if await commit(self._store, self._index, self._changes(job, choice.placements)):
                committed = choice.placements
                break
            conflicts += 1
        where = {**held, **committed}
        return PlaceResult(
            [(index, where[index]) for index in indexes if index in where],
            [(index, unplaced[index]) for index in indexes if index not in where],
            attempts,
            conflicts,
        )

    def _changes(self, job: Job, chosen: dict[int, str]) -> dict[str, Change]:
        resources = job.spec.task.resources
        added: dict[str, dict[str, AllocationEntry]] = {}
        for index, machine_id in chosen.items():
            entry = AllocationEntry(job=job.handle, index=index, resources=resources)
            added.setdefault(machine_id, {})[entry.task_id] = entry
        changes: dict[str, Change] = {}
        for machine_id, entries in added.items():
            record = self._index.record(machine_id)
            assert record.allocation is not None  # unreadable records have no free space
            tasks = {**record.allocation.tasks, **entries}
            changes[machine_id] = Change(
                record.revision, Allocation(machine=machine_id, tasks=tasks)
            )
        return changes

    def _remembered(self, request_id: str) -> PlaceResult | None:
        return self._responses.get(request_id) if request_id else None

    async def _read_job(self, job_handle: str) -> Job:
        entitlement_name, job_name = _parse(job_handle)
        kv = await self._store.get(keys.job(entitlement_name, job_name))
        if kv is None:
            raise JobNotFound(f"job {job_handle} not found")
        try:
            return from_json(Job, kv.value, stored=True)
        except ValidationError as error:
            raise CorruptRecord(
                f"the record of job {job_handle} is not valid: {_problems(error)}"
            ) from None

    async def _entitlement(self, job: Job) -> Entitlement:
        name = job.spec.entitlement
        known = self._index.entitlement(name)
        if known is not None:
            return known
        # The mirror may not have seen an entitlement created a moment ago.
        kv = await self._store.get(keys.entitlement(name))
        if kv is None:
            raise UnknownEntitlement(f"entitlement {name} of job {job.handle} does not exist")
        try:
            return from_json(Entitlement, kv.value, stored=True)
        except ValidationError as error:
            raise CorruptRecord(
                f"the record of entitlement {name} is not valid: {_problems(error)}"
            ) from None


def _problems(error: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(map(str, problem['loc'])) or 'value'}: {problem['msg']}"
        for problem in error.errors(include_url=False)
    )


def _parse(job_handle: str) -> tuple[str, str]:
    try:
        return parse_job_handle(job_handle)
    except ValueError as error:
        raise InvalidRequest(str(error)) from None


def _check_unique(indexes: Sequence[int]) -> None:
    repeated = sorted(index for index, seen in Counter(indexes).items() if seen > 1)
    if repeated:
        raise InvalidRequest(f"task indexes {_listed(repeated)} are given more than once")


def _listed(indexes: Sequence[int]) -> str:
    return ", ".join(map(str, indexes))
