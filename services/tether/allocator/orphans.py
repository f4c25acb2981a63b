"""Allocation entries no task will claim: a task the store does not hold, of a job that is gone,
being deleted, or no longer counts that far.

A Place keeps going when its caller goes away, so a deposed scheduler leader's request can
commit after the new leader released and deleted those tasks; nothing would ever release its
entries, and their machines would stay taken. The sweep finds such entries, and removes one only
when a sweep a tidying period earlier found it too (a live leader writes a placed task's record
right after its Place returns), in a transaction that compares the job and task records it
judged by.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence, Set

from pydantic import ValidationError

from tether.allocator.index import AllocationIndex
from tether.model import Job, from_json, parse_job_handle
from tether.store import Get, KeyValue, Store, keys

JOBS_PER_SWEEP = 100
"""Jobs whose entries one sweep checks (one store read of their records, one of their tasks'),
taking the jobs held in turn."""

RemoveGuarded = Callable[[str, Sequence[int], Mapping[str, int]], Awaitable[int]]
"""(job, task indexes, guards: key -> mod revision, 0 missing) -> tasks removed; removes
nothing when a guard moved."""


def unclaimed(held: Iterable[int], job: Job | None, tasks_present: Set[int]) -> list[int]:
    """The held task indexes no task will claim, given the job's record (None: gone) and which
    of those tasks have a record."""
    wanted = 0 if job is None or job.deleting else job.spec.count
    return sorted(index for index in held if index >= wanted and index not in tasks_present)


class OrphanSweep:
    """Checks `JOBS_PER_SWEEP` held jobs a sweep, in turn, and the suspects of the last one."""

    def __init__(self, store: Store, index: AllocationIndex, remove: RemoveGuarded) -> None:
        self._store = store
        self._index = index
        self._remove = remove
        self._cursor = 0
        self._suspects: dict[str, set[int]] = {}
        """Job -> the task indexes the last sweep found unclaimed."""

    async def sweep(self) -> int:
        """Removes the entries found unclaimed by this sweep and the one before; returns how
        many tasks' entries went."""
        jobs = await self._read_jobs(self._next_jobs())
        candidates = {
            handle: unclaimed(self._index.held(handle), job, set())
            for handle, (job, _) in jobs.items()
        }
        present = await self._tasks_present(candidates)
        found = {}
        for handle, indexes in candidates.items():
            orphans = set(indexes) - present[handle]
            if orphans:
                found[handle] = orphans
        removed = 0
        for handle, orphans in found.items():
            confirmed = sorted(orphans & self._suspects.get(handle, set()))
            if not confirmed:
                continue
            entitlement, name = parse_job_handle(handle)
            guards = {keys.job(entitlement, name): jobs[handle][1]}
            guards.update((keys.task(entitlement, name, index), 0) for index in confirmed)
            removed += await self._remove(handle, confirmed, guards)
        self._suspects = found
        return removed

    def _next_jobs(self) -> list[str]:
        held = self._index.jobs_held()
        if not held:
            return []
        start = self._cursor % len(held)
        turn = held[start : start + JOBS_PER_SWEEP]
        self._cursor = start + len(turn)
        return sorted({*turn, *(self._suspects.keys() & set(held))})

    async def _read_jobs(self, handles: Sequence[str]) -> dict[str, tuple[Job | None, int]]:
        """Handle -> (the job, None when gone; its record's mod revision, 0 when gone). A job
        whose record is not valid is left out: the scheduler reports it, and its entries stay."""
        found = await self._get([keys.job(*parse_job_handle(handle)) for handle in handles])
        jobs: dict[str, tuple[Job | None, int]] = {}
        for handle, kv in zip(handles, found, strict=True):
            if kv is None:
                jobs[handle] = (None, 0)
                continue
            try:
                jobs[handle] = (from_json(Job, kv.value, stored=True), kv.mod_revision)
            except ValidationError:
                continue
        return jobs

    async def _tasks_present(self, candidates: Mapping[str, Sequence[int]]) -> dict[str, set[int]]:
        asked = [(handle, index) for handle, indexes in candidates.items() for index in indexes]
        found = await self._get([keys.task(*parse_job_handle(h), index) for h, index in asked])
        present: dict[str, set[int]] = {handle: set() for handle in candidates}
        for (handle, index), kv in zip(asked, found, strict=True):
            if kv is not None:
                present[handle].add(index)
        return present

    async def _get(self, wanted: Sequence[str]) -> list[KeyValue | None]:
        """Each key's record (None: missing), `JOBS_PER_SWEEP` keys a transaction."""
        found: list[KeyValue | None] = []
        for start in range(0, len(wanted), JOBS_PER_SWEEP):
            chunk = wanted[start : start + JOBS_PER_SWEEP]
            result = await self._store.txn((), [Get(key) for key in chunk])
            found += [result.kv(position) for position in range(len(chunk))]
        return found
