"""Place, Release and Explain: the allocator's requests over its index and the store."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from pydantic import ValidationError

from tether import metrics
from tether.allocator.cache import ChoiceCache
from tether.allocator.commit import Write, commit
from tether.allocator.errors import (
    JobDeleting,
    StaleGeneration,
    TooManyConflicts,
)
from tether.allocator.group_commit import (
    CaughtUp,
    GroupCommit,
    PlaceRequest,
    PlaceResult,
    Refresh,
    see_conflict,
)
from tether.allocator.index import DECOMMISSIONED, FREE, NONE, AllocationIndex, Header
from tether.allocator.orphans import OrphanSweep
from tether.allocator.questions import Questions
from tether.allocator.requests import JobReader, check_in_range, check_unique, parse_handle
from tether.model import Task, from_json
from tether.store import Delete, Store, keys, mod_revision_is

RowTasks = dict[int, list[int]]
"""Row -> task indexes of one job held there."""

# Idle machines returned to the free pool in one transaction.
_RETURN_BATCH = 500
# Enough for every Place a scheduler may retry: retries follow the first call within seconds.
RESPONSE_MEMORY = 512
_RELEASE_CONFLICTS = metrics.ALLOCATOR_CONFLICTS.labels("release")


@dataclass(frozen=True, slots=True)
class EngineStats:
    """Counters since the replica started."""

    places: int = 0
    attempts: int = 0
    conflicts: int = 0
    merged: int = 0
    """Placements kept after a conflict because the machine still had room for them."""
    machines_joined: int = 0
    machines_returned: int = 0
    cache_hits: int = 0
    cache_misses: int = 0


class Engine:
    """Serves the allocator's requests; one per replica.

    Requests that write run one at a time in a replica: concurrent ones would mostly pick the
    same best-fitting machines and lose to each other. Conflicts then come only from other
    replicas.
    """

    def __init__(
        self,
        store: Store,
        index: AllocationIndex,
        *,
        max_attempts: int,
        idle_return_s: float,
        writer: str,
        caught_up: CaughtUp,
        resources_caught_up: CaughtUp,
        refresh: Refresh | None = None,
    ) -> None:
        """`caught_up(revision)` returns once the index holds every allocation record change
        up to `revision` (the allocation feed's wait), `resources_caught_up(revision)` once it
        holds every ephemeral resource's; with `refresh` (the index synced by partitions), a
        conflict reads the machines it was on instead of waiting for the feed."""
        self._store = store
        self._index = index
        self._max_attempts = max_attempts
        self._idle_return_s = idle_return_s
        self._writer = writer
        self._caught_up = caught_up
        self._refresh = refresh
        self.jobs = JobReader(store, index)
        self.cache = ChoiceCache(writer)
        index.listeners.append(self.cache)
        self._writing = asyncio.Lock()
        self._commits = GroupCommit(
            store,
            index,
            self.cache,
            writer=writer,
            max_attempts=max_attempts,
            writing=self._writing,
            caught_up=caught_up,
            resources_caught_up=resources_caught_up,
            refresh=refresh,
        )
        self.questions = Questions(index, self.cache, self.jobs, caught_up)
        """The read-only requests, on the same index and cache."""
        self._orphans = OrphanSweep(store, index, self.remove_unclaimed)
        self._responses: OrderedDict[str, PlaceResult] = OrderedDict()
        self._places = 0
        self._release_conflicts = 0
        self._machines_returned = 0

    @property
    def stats(self) -> EngineStats:
        commits = self._commits.stats
        return EngineStats(
            places=self._places,
            attempts=commits.attempts,
            conflicts=commits.conflicts + self._release_conflicts,
            merged=commits.merged,
            machines_joined=commits.machines_joined,
            machines_returned=self._machines_returned,
            cache_hits=self.cache.hits,
            cache_misses=self.cache.misses,
        )

    async def place(
        self,
        job_handle: str,
        indexes: Sequence[int],
        generation: int,
        request_id: str,
        preferred: Mapping[int, str] | None = None,
    ) -> PlaceResult:
        """Places the tasks `indexes` of the job at `generation` and commits the placements;
        a task `preferred` names a machine for goes there if the machine still takes it."""
        check_unique(indexes)
        remembered = self._remembered(request_id)
        if remembered is not None:
            return remembered
        job = await self.jobs.job(job_handle)
        if job.generation != generation:
            raise StaleGeneration(
                f"job {job_handle} is at generation {job.generation} in the store, "
                f"but the request is for generation {generation}"
            )
        if job.deleting:
            raise JobDeleting(f"job {job_handle} is being deleted; its tasks are not placed")
        check_in_range(job, indexes)
        remembered = self._remembered(request_id)
        if remembered is not None:
            # Another call with this id finished while the job was read.
            return remembered
        entitlement = await self.jobs.entitlement(job)
        request = PlaceRequest(
            job,
            entitlement,
            indexes,
            asyncio.get_running_loop().create_future(),
            keep=self._rows_of(preferred or {}, indexes),
        )
        self._places += 1
        self._commits.submit(request)
        # A caller that goes away leaves its request to finish: its plan may be in the store.
        result = await asyncio.shield(request.done)
        if request_id:
            self._responses[request_id] = result
            while len(self._responses) > RESPONSE_MEMORY:
                self._responses.popitem(last=False)
        return result

    async def close(self) -> None:
        """Waits for the Place requests under way to be committed (or to fail)."""
        await self._commits.close()

    async def release(
        self, job_handle: str, indexes: Sequence[int], *, return_emptied: bool = False
    ) -> int:
        """Removes tasks of the job (all of them when `indexes` is empty) from their machines,
        a task held on two machines from both; returns how many tasks were removed. With
        `return_emptied`, a machine left empty goes back to the free pool at once."""
        check_unique(indexes)
        async with self._writing:
            return await self._remove(
                job_handle,
                lambda: self._index.holding(job_handle, indexes),
                return_emptied=return_emptied,
            )

    async def release_duplicates(self) -> int:
        """Of each task held on two machines, removes the entries that are not on the machine
        its task record names (the scheduler took the other placement); returns how many tasks
        it tidied. A task without a machine yet is left for later."""
        tidied = 0
        for (job_handle, task), rows in self._index.held_twice().items():
            machine = await self._machine_of(job_handle, task)
            if machine is None or machine not in {self._index.ids[row] for row in rows}:
                continue

            def stale(job: str = job_handle, task: int = task, keep: str = machine) -> RowTasks:
                rows = self._index.held_twice().get((job, task), [])
                return {row: [task] for row in rows if self._index.ids[row] != keep}

            async with self._writing:
                tidied += await self._remove(job_handle, stale)
        return tidied

    async def release_unclaimed(self) -> int:
        """Removes allocation entries no task will claim (see `orphans`); returns how many
        tasks' entries went."""
        return await self._orphans.sweep()

    async def remove_unclaimed(
        self, job_handle: str, indexes: Sequence[int], guards: Mapping[str, int]
    ) -> int:
        """Removes the job's tasks `indexes` from their machines unless a key of `guards` (key
        -> mod revision, 0: missing) moved; returns how many tasks were removed."""
        assert indexes, "an empty list would release every task of the job"
        async with self._writing:
            return await self._remove(
                job_handle, lambda: self._index.holding(job_handle, indexes), guards=guards
            )

    async def _remove(
        self,
        job_handle: str,
        choose: Callable[[], RowTasks],
        *,
        return_emptied: bool = False,
        guards: Mapping[str, int] | None = None,
    ) -> int:
        """Removes the tasks `choose` names by row, choosing again after a conflict, unless
        one of `guards` (key -> mod revision, 0: missing) moved; returns how many tasks were
        removed. A machine left empty starts its idle period, or with `return_emptied` goes
        back to the free pool."""
        entitlement_name, job_name = parse_handle(job_handle)
        index = self._index
        for _ in range(self._max_attempts):
            by_row = choose()
            if not by_row:
                return 0
            headers: dict[int, Header] = {}
            writes = {}
            for row, tasks in by_row.items():
                owner, target, idle = index.header(row)
                emptied = owner != NONE and index.task_count[row] == len(tasks)
                if emptied:
                    idle = time.time()
                headers[row] = FREE if emptied and return_emptied else (owner, target, idle)
                machine_id = index.ids[row]
                writes[row] = Write(
                    int(index.revision[row]),
                    index.header_json(row, headers[row]),
                    removed=[
                        keys.allocation_entry(machine_id, entitlement_name, job_name, task)
                        for task in tasks
                    ],
                )
            outcome = await commit(self._store, index.ids, writes, {}, self._writer, guards)
            if outcome.succeeded:
                for row, tasks in by_row.items():
                    index.remove(row, job_handle, tasks, headers[row], outcome.revision)
                return len({task for tasks in by_row.values() for task in tasks})
            if outcome.guards != dict(guards or {}):
                return 0
            self._release_conflicts += 1
            _RELEASE_CONFLICTS.inc()
            machines = [index.ids[row] for row in by_row]
            await see_conflict(self._refresh, self._caught_up, machines, outcome.revision)
        raise TooManyConflicts(
            f"releasing tasks of {job_handle} conflicted with other allocators "
            f"{self._max_attempts} times; retry"
        )

    async def _machine_of(self, job_handle: str, task: int) -> str | None:
        """The machine the task's record names (None: none, or no readable record)."""
        entitlement_name, job_name = parse_handle(job_handle)
        kv = await self._store.get(keys.task(entitlement_name, job_name, task))
        if kv is None:
            return None
        try:
            return from_json(Task, kv.value, stored=True).machine
        except ValidationError:
            return None

    def _rows_of(self, machines: Mapping[int, str], indexes: Sequence[int]) -> dict[int, int]:
        """Task index -> the row of the machine named for it, for the tasks among `indexes`
        whose machine the index knows (a planner keeps such a row only where it still fits)."""
        row_of = self._index.row_of
        wanted = set(indexes)
        return {
            task: row_of[machine]
            for task, machine in machines.items()
            if task in wanted and machine in row_of
        }

    async def delete_expired(self, now: datetime) -> int:
        """Deletes the ephemeral resources whose expiry passed (unless set again meanwhile);
        how many went. Expired ones give no capacity before that already."""
        deleted = 0
        for entitlement, label, revision in self._index.expired_resources(now):
            key = keys.ephemeral_resource(entitlement, label)
            result = await self._store.txn([mod_revision_is(key, revision)], [Delete(key)])
            deleted += result.succeeded
        return deleted

    async def return_idle(self, now: float) -> int:
        """Moves machines that have been idle in an entitlement for the idle delay back to the
        free pool, and decommissioned ones at once (their capacity must stop counting for the
        entitlement); returns how many moved. Conflicting records wait for the next round."""
        index = self._index
        async with self._writing:
            rows = index.rows
            empty = (index.owner[:rows] != NONE) & (index.task_count[:rows] == 0)
            due = empty & (
                (index.idle_since[:rows] <= now - self._idle_return_s)
                | (index.state[:rows] == DECOMMISSIONED)
            )
            # An empty owned machine with no idle time (written by an older allocator) starts
            # its idle period now.
            unmarked = empty & np.isnan(index.idle_since[:rows])
            headers: dict[int, Header] = {}
            for row in np.flatnonzero(due | unmarked)[:_RETURN_BATCH].tolist():
                owner, target, _ = index.header(row)
                headers[row] = FREE if due[row] else (owner, target, now)
            if not headers:
                return 0
            writes = {
                row: Write(int(index.revision[row]), index.header_json(row, header))
                for row, header in headers.items()
            }
            outcome = await commit(self._store, index.ids, writes, {}, self._writer)
            if not outcome.succeeded:
                return 0
            for row, header in headers.items():
                index.set_header(row, header, outcome.revision)
            returned = int(due[list(headers)].sum())
            self._machines_returned += returned
            return returned

    def _remembered(self, request_id: str) -> PlaceResult | None:
        return self._responses.get(request_id) if request_id else None
