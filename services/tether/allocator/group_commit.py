"""The group commit: Place requests planned one after another and committed in batches."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from tether import metrics
from tether.allocator.cache import ChoiceCache
from tether.allocator.commit import Outcome, Write, commit
from tether.allocator.index import NONE, AllocationIndex, Snapshot, tasks_by_row
from tether.allocator.placement import Choice, Planner
from tether.model import Entitlement, Job
from tether.store import Store, StoreError, keys

_log = logging.getLogger(__name__)

Entry = tuple[str, bytes]
"""An allocation entry: key and value."""
CaughtUp = Callable[[int], Awaitable[None]]
"""Returns once the index shows every change of some records up to a store revision."""
Refresh = Callable[[Sequence[str]], Awaitable[None]]
"""Reads the allocation records of some machines into the index now (`index.parsync`)."""

# Place requests committed together in one transaction (group commit): each transaction waits
# for the store's disk write, so batching is what makes a replica fast.
_BATCH_REQUESTS = 64
_BATCH_ROWS = 4000
# How long a replica waits for its feed to show the store as a conflicting commit saw it.
_CATCH_UP_S = 5.0
# Bound once: a batch of 64 requests would look each child up by its labels 64 times.
_PLACED = metrics.ALLOCATOR_PLACEMENTS.labels("placed")
_UNPLACED = metrics.ALLOCATOR_PLACEMENTS.labels("unplaced")
_PLACE_CONFLICTS = metrics.ALLOCATOR_CONFLICTS.labels("place")


@dataclass(frozen=True, slots=True)
class PlaceResult:
    """Placed tasks (index, machine) and unplaced ones (index, reason), in request order."""

    placements: list[tuple[int, str]]
    unplaced: list[tuple[int, str]]
    attempts: int
    conflicts: int


@dataclass(slots=True)
class PlaceRequest:
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
class Batch:
    """Place requests planned together, to be committed in one transaction."""

    planned: list[PlaceRequest] = field(default_factory=list)
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
class CommitStats:
    """Counters of the group commit since the replica started."""

    attempts: int = 0
    """Transactions sent."""
    conflicts: int = 0
    merged: int = 0
    """Placements kept after a conflict because the machine still had room for them."""
    machines_joined: int = 0


class GroupCommit:
    """Plans queued Place requests in order, each seeing the earlier ones' machines as taken,
    and commits them a batch per transaction; a request whose machines or quota another
    allocator changed is planned again, keeping what still fits, up to `max_attempts`.

    It writes under `writing`, the replica's lock for every request that writes.
    """

    def __init__(
        self,
        store: Store,
        index: AllocationIndex,
        cache: ChoiceCache,
        *,
        writer: str,
        max_attempts: int,
        writing: asyncio.Lock,
        caught_up: CaughtUp,
        resources_caught_up: CaughtUp,
        refresh: Refresh | None = None,
    ) -> None:
        self._store = store
        self._index = index
        self._cache = cache
        self._refresh = refresh
        self._writer = writer
        self._max_attempts = max_attempts
        self._writing = writing
        self._caught_up = caught_up
        self._resources_caught_up = resources_caught_up
        self._queue: list[PlaceRequest] = []
        self._committer: asyncio.Task[None] | None = None
        self._fences: dict[str, int] = {}
        self.stats = CommitStats()

    def submit(self, request: PlaceRequest) -> None:
        """Queues the request; `request.done` gets its result once committed (or given up)."""
        self._queue.append(request)
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_queued(), name="place commits")

    async def close(self) -> None:
        """Waits for the requests under way to be committed (or to fail)."""
        if self._committer is not None:
            await self._committer
            self._committer = None

    async def _commit_queued(self) -> None:
        """Commits queued requests in batches until none is left, planning each batch while
        the one before it is in the store: planning takes this process's CPU, a commit the
        store's, and the two overlap."""
        async with self._writing:
            in_flight: tuple[Batch, asyncio.Task[Outcome]] | None = None
            batch: Batch | None = None
            taken: list[PlaceRequest] = []
            try:
                while True:
                    if self._queue:
                        taken, batch = self._take_batch(), Batch()
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

    def _take_batch(self) -> list[PlaceRequest]:
        batch, self._queue = self._queue[:_BATCH_REQUESTS], self._queue[_BATCH_REQUESTS:]
        return batch

    def _prepare(self, requests: list[PlaceRequest], batch: Batch) -> None:
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

    async def _send(self, batch: Batch) -> Outcome:
        """Commits a planned batch: every row's record after all its requests, over the
        record its plans saw (or the one the batch before it just wrote)."""
        index = self._index
        writes = {
            row: Write(batch.base[row], index.header_json(row), entries)
            for row, entries in batch.added.items()
        }
        fences = {name: self._fences.get(name, 0) for name in batch.fenced}
        return await commit(self._store, index.ids, writes, fences, self._writer, batch.guards)

    def _guards(self, request: PlaceRequest) -> dict[str, int]:
        """The ephemeral resources the request's plan counted on, at the revisions it saw: a
        member lowering one under the plan must make the commit fail."""
        name, index = request.entitlement.name, self._index
        guards = {}
        for label in request.job.spec.task.resources.extra:
            revision = index.ephemeral_revision(name, label)
            if revision:
                guards[keys.ephemeral_resource(name, label)] = revision
        return guards

    async def _finish_batch(self, batch: Batch, outcome: Outcome) -> int | None:
        """Answers a batch's requests after its commit, or rolls it back and queues them
        again to merge; returns the commit's revision (None: it conflicted)."""
        self.stats.attempts += 1
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
                self.stats.machines_joined += len(request.choice.joined)
                _PLACED.inc(len(request.choice.placements))
                self._finish(request, request.choice.unplaced)
            return outcome.revision
        self.stats.conflicts += 1
        _PLACE_CONFLICTS.inc()
        self._roll_back(batch)
        fences = self._fences
        moved = {name for name, fence in outcome.fences.items() if fence != fences.get(name, 0)}
        # The next plan must see what the other allocator committed: its records, and its
        # tasks counted against the quota of a fence that moved.
        fences.update(outcome.fences)
        ids = self._index.ids
        touched = sorted(
            {ids[row] for snapshot in batch.snapshots for row in snapshot.rows.tolist()}
        )
        await see_conflict(self._refresh, self._caught_up, touched, outcome.revision)
        guards = {key for key, revision in outcome.guards.items() if revision != batch.guards[key]}
        if guards:
            # Up to the revision the conflict read each at (one deleted: the conflict's own).
            revision = max(outcome.guards[key] or outcome.revision for key in guards)
            await catch_up(self._resources_caught_up, revision)
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

    def _roll_back(self, batch: Batch) -> None:
        for snapshot in reversed(batch.snapshots):
            self._index.roll_back(snapshot)

    def _plan(self, request: PlaceRequest) -> Choice | None:
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
        choice = Planner(index, self._cache, job, request.entitlement).choose(
            pending, held, request.keep
        )
        if not choice.placements:
            self._finish(request, choice.unplaced)
            return None
        if request.attempts:  # before any, `keep` holds preferred machines, not a plan
            self.stats.merged += sum(
                1 for task, row in choice.placements.items() if request.keep.get(task) == row
            )
        request.choice = choice
        return choice

    def _finish(self, request: PlaceRequest, unplaced: dict[int, str]) -> None:
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


async def see_conflict(
    refresh: Refresh | None, caught_up: CaughtUp, machines: Sequence[str], revision: int
) -> None:
    """After a commit conflicted on `machines`: reads them now where the index is synced by
    partitions (`refresh`), else waits for the feed to show the store at `revision`."""
    if refresh is None:
        await catch_up(caught_up, revision)
        return
    try:
        await refresh(machines)
    except StoreError as error:
        # As when a feed does not catch up in time: the next plan is made on what the index
        # has, and the commit's compares still guard the machines.
        _log.warning("reading %d machines after a conflict failed: %s", len(machines), error)


async def catch_up(caught_up: CaughtUp, revision: int) -> None:
    """Waits until the index shows every change up to `revision` of what `caught_up` waits
    for; on a timeout the next attempt plans on what the index has, and its compares still
    protect the machines."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(_CATCH_UP_S):
            await caught_up(revision)


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
