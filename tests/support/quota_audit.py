"""Replaying a region's allocation entries revision by revision: did any entitlement ever hold
more than its quota and borrowing limit allow?"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Final

from tether.model import Entitlement, Resources, from_json
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
