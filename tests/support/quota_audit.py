"""Replaying a region's history revision by revision: did any entitlement ever hold (allocation
entries) or reserve (admission records) more than its quota and borrowing limit allow?"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

from tether.model import Entitlement, Job, Resources, from_json
from tether.model.admission import Admission
from tether.model.quota_tree import QuotaTree
from tether.store import EventType, Store, keys
from tether.store.base import Watch, WatchEvent

_QUIET_S: Final = 3.0


async def over_quota_revisions(
    store: Store, entitlements: list[Entitlement], start: int, end: int
) -> list[str]:
    """Every revision from `start` (exclusive) to `end` at which the tasks on machines of
    `entitlements` took more than their tree allows, with what was over; empty when none did.
    Entries of other entitlements are ignored. The history must not be compacted."""
    held: dict[str, tuple[str, Resources]] = {}
    """Entry key -> (entitlement, the task's resources)."""
    found: list[str] = []
    names = {entitlement.name for entitlement in entitlements}
    if end <= start:
        return found
    listing = await store.range(keys.ALLOCATIONS, revision=start)
    for kv in listing.kvs:
        _apply(held, names, kv.key, kv.value)
    async with store.watch(keys.ALLOCATIONS, start_revision=start + 1) as watch:
        async for events in _until_quiet(watch):
            for event in events:
                value = event.kv.value if event.type is EventType.PUT else None
                _apply(held, names, event.kv.key, value)
            tree = QuotaTree(entitlements)
            used: defaultdict[str, Resources] = defaultdict(Resources)
            for entitlement, resources in held.values():
                used[entitlement] = used[entitlement] + resources
            for entitlement, resources in used.items():
                tree.use(entitlement, tree.vector(resources))
            over = tree.over_quota()
            if over:
                found.append(f"revision {events[0].revision}: {'; '.join(over)}")
            if watch.next_revision > end:
                break
    return found


async def _until_quiet(watch: Watch) -> AsyncIterator[list[WatchEvent]]:
    """The watch's batches until none comes for `_QUIET_S`: history is sent at once, so a
    pause that long means every change up to now has been seen, even when the last one is
    older than the revision asked for."""
    batches = aiter(watch)
    while True:
        try:
            async with asyncio.timeout(_QUIET_S):
                events = await anext(batches)
        except (TimeoutError, StopAsyncIteration):
            return
        yield events


def _apply(
    held: dict[str, tuple[str, Resources]], names: set[str], key: str, value: bytes | None
) -> None:
    _, task = keys.split_allocation(key)
    if task is None:
        return
    entitlement = task.split("/", 1)[0]
    if entitlement not in names:
        return
    if value is None:
        held.pop(key, None)
    else:
        held[key] = (entitlement, from_json(Resources, value, stored=True))


@dataclass
class Reservations:
    """What the admission records reserve, as a decider charges them when no task is on a
    machine: task resources times `admitted`, for every job not being deleted (a job being
    deleted holds only its tasks on machines)."""

    deleting: dict[str, bool] = field(default_factory=dict)
    """Job handle -> whether it is being deleted."""
    admissions: dict[str, Admission] = field(default_factory=dict)

    def apply(self, key: str, value: bytes | None) -> None:
        """One key of `jobs/` or `admissions/` put (`value`) or deleted (None); others ignored."""
        if key.startswith(keys.JOBS):
            handle = key[len(keys.JOBS) :]
            if value is None:
                self.deleting.pop(handle, None)
            else:
                self.deleting[handle] = from_json(Job, value, stored=True).deleting
        elif key.startswith(keys.ADMISSIONS):
            handle = key[len(keys.ADMISSIONS) :]
            if value is None:
                self.admissions.pop(handle, None)
            else:
                self.admissions[handle] = from_json(Admission, value, stored=True)

    def reserving(self) -> list[Admission]:
        return [
            record
            for handle, record in self.admissions.items()
            if record.admitted and not self.deleting.get(handle, False)
        ]

    def tasks(self) -> int:
        """The tasks reserved in all."""
        return sum(record.admitted for record in self.reserving())

    def over_quota(self, entitlements: list[Entitlement]) -> list[str]:
        """Every entitlement of `entitlements` whose subtree reserves beyond its quota and
        borrowing limit, with the dimensions; records of other entitlements are ignored."""
        tree = QuotaTree(entitlements)
        for record in self.reserving():
            entitlement = record.job.split("/", 1)[0]
            if entitlement in tree.nodes:
                tree.use(entitlement, tree.vector(record.task_resources * record.admitted))
        return tree.over_quota()


async def reservation_history(
    store: Store, start: int, end: int
) -> AsyncIterator[tuple[int, list[WatchEvent], Reservations]]:
    """The reservations at every revision from `start` (exclusive) to `end` (inclusive), with
    the revision and all its events (any prefix). The history must not be compacted."""
    reservations = Reservations()
    if end <= start:
        return
    for prefix in (keys.JOBS, keys.ADMISSIONS):
        for kv in (await store.range(prefix, revision=start)).kvs:
            reservations.apply(kv.key, kv.value)
    async with store.watch(keys.ROOT, start_revision=start + 1) as watch:
        async for events in watch:
            for event in events:
                value = event.kv.value if event.type is EventType.PUT else None
                reservations.apply(event.kv.key, value)
            yield events[0].revision, events, reservations
            if watch.next_revision > end:
                return


async def over_reserved_revisions(
    store: Store, entitlements: list[Entitlement], start: int, end: int
) -> list[str]:
    """Every revision from `start` (exclusive) to `end` at which the admission records of
    `entitlements` reserved more than their tree allows, with what was over."""
    found = []
    async for revision, _, reservations in reservation_history(store, start, end):
        over = reservations.over_quota(entitlements)
        if over:
            found.append(f"revision {revision}: {'; '.join(over)}")
    return found
