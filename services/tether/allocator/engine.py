"""Place, Release and Explain: the allocator's requests over its index and the store."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from pydantic import ValidationError

from tether import metrics
from tether.allocator.cache import ChoiceCache
from tether.allocator.commit import Outcome, Write, commit
from tether.allocator.ephemeral import LabelState, label_state
from tether.allocator.errors import (
    CorruptRecord,
    InvalidRequest,
    JobDeleting,
    JobNotFound,
    StaleGeneration,
    TooManyConflicts,
    UnknownEntitlement,
)
from tether.allocator.explain import Explanation, explain
from tether.allocator.index import (
    DECOMMISSIONED,
    FREE,
    NONE,
    AllocationIndex,
    Header,
    Snapshot,
    tasks_by_row,
)
from tether.allocator.placement import Choice, Planner
from tether.allocator.preemption import PreemptionFit, Stopped, check_preemption
from tether.model import Entitlement, Job, Task, from_json, parse_job_handle, problems_text
from tether.model.ephemeral import EphemeralResource
from tether.store import Delete, Store, keys, mod_revision_is

Entry = tuple[str, bytes]
"""An allocation entry: key and value."""
RowTasks = dict[int, list[int]]
"""Row -> task indexes of one job held there."""

# Idle machines returned to the free pool in one transaction.
_RETURN_BATCH = 500
# Place requests committed together in one transaction (group commit): each transaction waits
# for the store's disk write, so batching is what makes a replica fast.
_BATCH_REQUESTS = 64
_BATCH_ROWS = 4000
# How long a replica waits for its feed to show the store as a conflicting commit saw it.
_CATCH_UP_S = 5.0
# Enough for every Place a scheduler may retry: retries follow the first call within seconds.
RESPONSE_MEMORY = 512
# Bound once: a batch of 64 requests would look each child up by its labels 64 times.
_PLACED = metrics.ALLOCATOR_PLACEMENTS.labels("placed")
_UNPLACED = metrics.ALLOCATOR_PLACEMENTS.labels("unplaced")
_PLACE_CONFLICTS = metrics.ALLOCATOR_CONFLICTS.labels("place")
_RELEASE_CONFLICTS = metrics.ALLOCATOR_CONFLICTS.labels("release")


@dataclass(frozen=True, slots=True)
class PlaceResult:
    """Placed tasks (index, machine) and unplaced ones (index, reason), in request order."""

    placements: list[tuple[int, str]]
    unplaced: list[tuple[int, str]]
    attempts: int
    conflicts: int


@dataclass(slots=True)
class _Request:
    """A Place on its way through the group commit."""

    job: Job
    entitlement: Entitlement
    indexes: Sequence[int]
    done: asyncio.Future[PlaceResult]
    attempts: int = 0
    conflicts: int = 0
    keep: dict[int, int] = field(default_factory=dict)
    choice: Choice | None = None
    guards: dict[str, int] = field(default_factory=dict)
    """Key -> revision of the ephemeral resources its plan counted on."""


@dataclass(slots=True)
class _Batch:
    """Place requests planned together, to be committed in one transaction."""

    planned: list[_Request] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    """The touched rows' records before each request, in the order they were planned."""
    base: dict[int, int] = field(default_factory=dict)
    """Row -> the record revision the plans saw."""
    added: dict[int, list[Entry]] = field(default_factory=dict)
    fenced: set[str] = field(default_factory=set)
    """Entitlements whose quota fence the commit compares and bumps."""
    guards: dict[str, int] = field(default_factory=dict)
    """Ephemeral resources the plans counted on: key -> the revision they saw."""


@dataclass(slots=True)
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
        caught_up: Callable[[int], Awaitable[None]],
        resources_caught_up: Callable[[int], Awaitable[None]],
    ) -> None:
        """`caught_up(revision)` returns once the index holds every allocation record change
        up to `revision` (the allocation feed's wait), `resources_caught_up(revision)` once it
        holds every ephemeral resource's."""
        self._store = store
        self._index = index
        self._max_attempts = max_attempts
        self._idle_return_s = idle_return_s
        self._writer = writer
        self._caught_up = caught_up
        self._resources_caught_up = resources_caught_up
        self.cache = ChoiceCache(writer)
        index.listeners.append(self.cache)
        self._writing = asyncio.Lock()
        self._queue: list[_Request] = []
        self._committer: asyncio.Task[None] | None = None
        self._fences: dict[str, int] = {}
        self._responses: OrderedDict[str, PlaceResult] = OrderedDict()
        self._stats = EngineStats()

    @property
    def stats(self) -> EngineStats:
        self._stats.cache_hits, self._stats.cache_misses = self.cache.hits, self.cache.misses
        return self._stats

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
        _check_in_range(job, indexes)
        remembered = self._remembered(request_id)
        if remembered is not None:
            # Another call with this id finished while the job was read.
            return remembered
        entitlement = await self._entitlement(job)
        request = _Request(job, entitlement, indexes, asyncio.get_running_loop().create_future())
        self._stats.places += 1
        self._queue.append(request)
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_queued(), name="place commits")
        # A caller that goes away leaves its request to finish: its plan may be in the store.
        result = await asyncio.shield(request.done)
        if request_id:
            self._responses[request_id] = result
            while len(self._responses) > RESPONSE_MEMORY:
                self._responses.popitem(last=False)
        return result

    async def close(self) -> None:
        """Waits for the Place requests under way to be committed (or to fail)."""
        if self._committer is not None:
            await self._committer
            self._committer = None

    async def release(
        self, job_handle: str, indexes: Sequence[int], *, return_emptied: bool = False
    ) -> int:
        """Removes tasks of the job (all of them when `indexes` is empty) from their machines,
        a task held on two machines from both; returns how many tasks were removed. With
        `return_emptied`, a machine left empty goes back to the free pool at once."""
        _check_unique(indexes)
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

    async def _remove(
        self, job_handle: str, choose: Callable[[], RowTasks], *, return_emptied: bool = False
    ) -> int:
        """Removes the tasks `choose` names by row, choosing again after a conflict; returns
        how many tasks were removed. A machine left empty starts its idle period, or with
        `return_emptied` goes back to the free pool."""
        entitlement_name, job_name = _parse(job_handle)
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
            outcome = await commit(self._store, index.ids, writes, {}, self._writer)
            if outcome.succeeded:
                for row, tasks in by_row.items():
                    index.remove(row, job_handle, tasks, headers[row], outcome.revision)
                return len({task for tasks in by_row.values() for task in tasks})
            self._stats.conflicts += 1
            _RELEASE_CONFLICTS.inc()
            await self._catch_up(outcome.revision)
        raise TooManyConflicts(
            f"releasing tasks of {job_handle} conflicted with other allocators "
            f"{self._max_attempts} times; retry"
        )

    async def _machine_of(self, job_handle: str, task: int) -> str | None:
        """The machine the task's record names (None: none, or no readable record)."""
        entitlement_name, job_name = _parse(job_handle)
        kv = await self._store.get(keys.task(entitlement_name, job_name, task))
        if kv is None:
            return None
        try:
            return from_json(Task, kv.value, stored=True).machine
        except ValidationError:
            return None

    async def explain(self, job_handle: str) -> Explanation:
        """Why one more task of the job would go where it would, or why it cannot go anywhere."""
        job = await self._read_job(job_handle)
        entitlement = await self._entitlement(job)
        return explain(Planner(self._index, self.cache, job, entitlement))

    async def check_preemption(
        self, job_handle: str, indexes: Sequence[int], victims: Stopped, spare: Stopped
    ) -> PreemptionFit:
        """Whether the job's tasks `indexes` would be placed once the victims' tasks stop, and
        how many of the spare must stop too (`preemption.check_preemption`)."""
        _check_unique(indexes)
        for handle, _ in [*victims, *spare]:
            _parse(handle)
        job = await self._read_job(job_handle)
        _check_in_range(job, indexes)
        entitlement = await self._entitlement(job)
        return check_preemption(self._index, self.cache, job, entitlement, indexes, victims, spare)

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
            await self._catch_up(min_revision)
        return [
            label_state(
                self._index, entitlement, record.label, record, over_held=over_held, limit=limit
            )
            for record in records
        ]

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
            self._stats.machines_returned += returned
            return returned

    async def _commit_queued(self) -> None:
        """Commits queued requests in batches until none is left, planning each batch while
        the one before it is in the store: planning takes this process's CPU, a commit the
        store's, and the two overlap."""
        async with self._writing:
            in_flight: tuple[_Batch, asyncio.Task[Outcome]] | None = None
            batch: _Batch | None = None
            taken: list[_Request] = []
            try:
                while True:
                    if self._queue:
                        taken, batch = self._take_batch(), _Batch()
                        self._prepare(taken, batch)
                        taken = []
                        if not batch.planned:
                            batch = None
                    if in_flight is not None:
                        outcome = await in_flight[1]
                        sent, in_flight = in_flight[0], None
                        if not outcome.succeeded and batch is not None:
                            # Planned over tentative records that are about to go: plan it
                            # again, after the requests before it.
                            self._roll_back(batch)
                            self._queue[:0] = batch.planned
                            batch = None
                        committed = await self._finish_batch(sent, outcome)
                        if batch is not None and committed is not None:
                            # Rows both batches touched: the first one's commit is the base.
                            for row in batch.base.keys() & sent.added.keys():
                                batch.base[row] = committed
                    if batch is None:
                        if not self._queue:
                            return
                        continue
                    in_flight = (batch, asyncio.create_task(self._send(batch)))
                    batch = None
                    # Let the transaction leave before planning the next batch.
                    await asyncio.sleep(0)
            except Exception as error:
                # The store failed (or planning did): every request waiting gets the error,
                # and the index forgets the tentative placements.
                for unsent in (batch, in_flight[0] if in_flight else None):
                    if unsent is not None:
                        self._roll_back(unsent)
                        self._queue[:0] = unsent.planned
                for request in [*taken, *self._queue]:
                    if not request.done.done():
                        request.done.set_exception(error)
                self._queue = []

    def _take_batch(self) -> list[_Request]:
        batch, self._queue = self._queue[:_BATCH_REQUESTS], self._queue[_BATCH_REQUESTS:]
        return batch

    def _prepare(self, requests: list[_Request], batch: _Batch) -> None:
        """Plans the requests into `batch` one after another, each seeing the earlier ones'
        machines as taken."""
        index = self._index
        for position, request in enumerate(requests):
            if len(batch.added) >= _BATCH_ROWS:
                # The transaction is big enough: the rest waits for the next one, in order.
                self._queue[:0] = requests[position:]
                break
            choice = self._plan(request)
            if choice is None:
                continue
            batch.planned.append(request)
            batch.fenced.add(request.entitlement.name)
            request.guards = self._guards(request)
            batch.guards.update(request.guards)
            snapshot, entries = place_tentatively(index, request.job, request.entitlement, choice)
            batch.snapshots.append(snapshot)
            for row, revision in zip(
                snapshot.rows.tolist(), snapshot.revisions.tolist(), strict=True
            ):
                batch.base.setdefault(row, revision)
            for row, added in entries.items():
                batch.added.setdefault(row, []).extend(added)

    async def _send(self, batch: _Batch) -> Outcome:
        """Commits a planned batch: every row's record after all its requests, over the
        record its plans saw (or the one the batch before it just wrote)."""
        index = self._index
        writes = {
            row: Write(batch.base[row], index.header_json(row), entries)
            for row, entries in batch.added.items()
        }
        fences = {name: self._fences.get(name, 0) for name in batch.fenced}
        return await commit(self._store, index.ids, writes, fences, self._writer, batch.guards)

    def _guards(self, request: _Request) -> dict[str, int]:
        """The ephemeral resources the request's plan counted on, at the revisions it saw: a
        member lowering one under the plan must make the commit fail."""
        name, index = request.entitlement.name, self._index
        guards = {}
        for label in request.job.spec.task.resources.extra:
            revision = index.ephemeral_revision(name, label)
            if revision:
                guards[keys.ephemeral_resource(name, label)] = revision
        return guards

    async def _finish_batch(self, batch: _Batch, outcome: Outcome) -> int | None:
        """Answers a batch's requests after its commit, or rolls it back and queues them
        again to merge; returns the commit's revision (None: it conflicted)."""
        self._stats.attempts += 1
        # Counted here, not when planned: a plan dropped unsent (the batch before it
        # conflicted) is no store transaction.
        for request in batch.planned:
            request.attempts += 1
        if outcome.succeeded:
            self._index.confirm(batch.added, outcome.revision)
            for name in batch.fenced:
                self._fences[name] = outcome.revision
            for request in batch.planned:
                assert request.choice is not None
                self._stats.machines_joined += len(request.choice.joined)
                _PLACED.inc(len(request.choice.placements))
                self._finish(request, request.choice.unplaced)
            return outcome.revision
        self._stats.conflicts += 1
        _PLACE_CONFLICTS.inc()
        self._roll_back(batch)
        fences = self._fences
        moved = {name for name, fence in outcome.fences.items() if fence != fences.get(name, 0)}
        # The next plan must see what the other allocator committed: its records, and its
        # tasks counted against the quota of a fence that moved.
        fences.update(outcome.fences)
        await self._catch_up(outcome.revision)
        guards = {key for key, revision in outcome.guards.items() if revision != batch.guards[key]}
        if guards:
            # Up to the revision the conflict read each at (one deleted: the conflict's own).
            revision = max(outcome.guards[key] or outcome.revision for key in guards)
            await self._catch_up(revision, self._resources_caught_up)
        # Only a request whose own machines or quota another writer changed conflicted; the
        # others shared the failed transaction and are simply sent again. If the feed did
        # not show the change in time, every request counts it, so retries stay bounded.
        conflicted = [
            request.entitlement.name in moved
            or not guards.isdisjoint(request.guards)
            or self._changed_since(snapshot, batch.base)
            for request, snapshot in zip(batch.planned, batch.snapshots, strict=True)
        ]
        for request, changed in zip(batch.planned, conflicted, strict=True):
            assert request.choice is not None
            request.conflicts += changed or not any(conflicted)
            request.keep = request.choice.placements
        self._queue[:0] = batch.planned
        return None

    def _changed_since(self, snapshot: Snapshot, base: dict[int, int]) -> bool:
        """Whether another writer changed a row of `snapshot` after the batch's `base`."""
        bases = np.fromiter((base[row] for row in snapshot.rows.tolist()), np.int64)
        return bool((self._index.revision[snapshot.rows] > bases).any())

    def _roll_back(self, batch: _Batch) -> None:
        for snapshot in reversed(batch.snapshots):
            self._index.roll_back(snapshot)

    def _plan(self, request: _Request) -> Choice | None:
        """The request's next attempt, or None when it is finished (and answered)."""
        index, job = self._index, request.job
        held = index.held(job.handle)
        pending = [i for i in request.indexes if i not in held]
        if not pending:
            self._finish(request, {})
            return None
        if request.conflicts == self._max_attempts:
            self._finish(
                request,
                dict.fromkeys(
                    pending,
                    f"gave up after {request.conflicts} conflicts: other allocators kept "
                    "changing the chosen machines; retry later",
                ),
            )
            return None
        choice = Planner(index, self.cache, job, request.entitlement).choose(
            pending, held, request.keep
        )
        if not choice.placements:
            self._finish(request, choice.unplaced)
            return None
        self._stats.merged += sum(
            1 for task, row in choice.placements.items() if request.keep.get(task) == row
        )
        request.choice = choice
        return choice

    def _finish(self, request: _Request, unplaced: dict[int, str]) -> None:
        where = self._index.held(request.job.handle)
        ids = self._index.ids
        result = PlaceResult(
            [(i, ids[where[i]]) for i in request.indexes if i in where],
            [(i, unplaced[i]) for i in request.indexes if i not in where and i in unplaced],
            request.attempts,
            request.conflicts,
        )
        _UNPLACED.inc(len(result.unplaced))
        request.done.set_result(result)

    async def _catch_up(
        self, revision: int, caught_up: Callable[[int], Awaitable[None]] | None = None
    ) -> None:
        """Waits until the index shows every change up to `revision` (of the allocation
        records, or of what `caught_up` waits for); on a timeout the next attempt plans on
        what the index has, and its compares still protect the machines."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_CATCH_UP_S):
                await (caught_up or self._caught_up)(revision)

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
                f"the record of job {job_handle} is not valid: {problems_text(error)}"
            ) from None

    async def _entitlement(self, job: Job) -> Entitlement:
        name = job.spec.entitlement
        known = self._index.entitlement(name)
        if known is not None:
            return known
        # The feed may not have seen an entitlement created a moment ago.
        kv = await self._store.get(keys.entitlement(name))
        if kv is None:
            raise UnknownEntitlement(f"entitlement {name} of job {job.handle} does not exist")
        try:
            return from_json(Entitlement, kv.value, stored=True)
        except ValidationError as error:
            raise CorruptRecord(
                f"the record of entitlement {name} is not valid: {problems_text(error)}"
            ) from None


def place_tentatively(
    index: AllocationIndex, job: Job, entitlement: Entitlement, choice: Choice
) -> tuple[Snapshot, dict[int, list[Entry]]]:
    """Shows a choice in the index for the plans after it; returns the touched rows' records
    from before, and the allocation entries (key, value) to commit by row (with the record
    `index.header_json(row)` of each)."""
    shape = index.shape(job.spec.task.resources.model_dump(mode="json"))
    joined = (
        index.owners.code(entitlement.name),
        NONE if entitlement.host_profile is None else index.profiles.code(entitlement.host_profile),
        math.nan,
    )
    snapshot = index.place_tentatively(
        job.handle, choice.placements, shape, joined if choice.joined else None
    )
    entitlement_name, job_name = job.spec.entitlement, job.spec.name
    entries = {
        row: [
            (keys.allocation_entry(index.ids[row], entitlement_name, job_name, task), shape.json)
            for task in tasks
        ]
        for row, tasks in tasks_by_row(choice.placements).items()
    }
    return snapshot, entries


def _parse(job_handle: str) -> tuple[str, str]:
    try:
        return parse_job_handle(job_handle)
    except ValueError as error:
        raise InvalidRequest(str(error)) from None


def _check_unique(indexes: Sequence[int]) -> None:
    repeated = sorted(index for index, seen in Counter(indexes).items() if seen > 1)
    if repeated:
        raise InvalidRequest(f"task indexes {_listed(repeated)} are given more than once")


def _check_in_range(job: Job, indexes: Sequence[int]) -> None:
    too_high = [index for index in indexes if index >= job.spec.count]
    if too_high:
        raise InvalidRequest(
            f"task indexes {_listed(too_high)} are out of range: job {job.handle} has "
            f"{job.spec.count} tasks (0 to {job.spec.count - 1})"
        )


def _listed(indexes: Sequence[int]) -> str:
    return ", ".join(map(str, indexes))
