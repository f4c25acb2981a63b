"""The region's changes turned into events: every source's prefix listed at one revision, then a
single watch of the whole keyspace, so that events come in store order whatever their source."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from tether.frontend.events.sources.base import Change, Source
from tether.frontend.events.sources.members import Members
from tether.frontend.events.sources.owners import FREE_POOL, Owners
from tether.frontend.events.sources.registry import SOURCES
from tether.model.event import RegionEvent, RegionObject
from tether.store import CompactedError, EventType, Store, StoreError, WatchEvent, keys

_log = logging.getLogger(__name__)

_PAGE = 10_000
_RETRY_S = 0.5

Owned = TypeVar("Owned", RegionEvent, RegionObject)

Batch = tuple[int, list[RegionEvent]]
"""One store revision and its events (often none: most changes are no event)."""


class EventFeed:
    """Digests of every key the sources follow, and the events of each change to them.

    `list_at` reads the sources' prefixes at one revision; `follow` then watches from the next
    and hands each revision's events to `deliver`, in order. A watch whose history was compacted
    lists again and tells the differences as events, so nothing is skipped silently: the
    changes in between are told as one.
    """

    def __init__(
        self,
        store: Store,
        deliver: Callable[[Batch], None],
        sources: Sequence[Source[Any]] = SOURCES,
    ) -> None:
        self._store = store
        self._deliver = deliver
        self._sources = tuple(sources)
        self._digests: dict[str, Hashable] = {}
        self.revision = 0
        """Every change up to this revision has been told."""
        self._members = _only(self._sources, Members)
        self._owners = _only(self._sources, Owners)

    def source_of(self, key: str) -> Source[Any] | None:
        for source in self._sources:
            if key.startswith(source.prefix):
                return source
        return None

    def members(self, entitlement: str) -> frozenset[str]:
        """The principals who see `entitlement`'s events (admins see every event)."""
        found = self._digests.get(self._members.prefix + entitlement)
        return found if isinstance(found, frozenset) else frozenset()

    def owner(self, machine: str) -> str | None:
        """The entitlement `machine` belongs to; None in the free pool."""
        found = self._digests.get(self._owners.prefix + machine)
        return found if isinstance(found, str) and found != FREE_POOL else None

    def objects(self) -> list[RegionObject]:
        """The state now of everything followed, in key order."""
        found = []
        for key, digest in sorted(self._digests.items()):
            source = self.source_of(key)
            state = None if source is None else source.state(key, digest)
            if state is not None:
                found.append(self._owned(state))
        return found

    async def list_at(self, revision: int = 0) -> int:
        """Reads every source's prefix at `revision` (0: the store's current one) and returns
        the revision read. The first listing tells nothing; a later one tells what changed since
        the revision before. Raises CompactedError when that revision's history is gone."""
        listed: dict[str, Hashable] = {}
        for source in self._sources:
            start_after: str | None = None
            while True:
                page = await self._store.range(
                    source.prefix, start_after=start_after, limit=_PAGE, revision=revision
                )
                revision = page.revision
                for kv in page.kvs:
                    digest = source.digest(kv)
                    if digest is not None:
                        listed[kv.key] = digest
                if not page.more or not page.kvs:
                    break
                start_after = page.kvs[-1].key
        if self.revision:
            self._tell_differences(listed, revision)
        self._digests = listed
        self.revision = revision
        return revision

    async def follow(self) -> None:
        """Watches from the revision after the last one told, until cancelled."""
        while True:
            try:
                async with self._store.watch(keys.ROOT, start_revision=self.revision + 1) as watch:
                    async for changes in watch:
                        self._apply(changes)
            except CompactedError:
                _log.warning(
                    "the event feed's history was compacted at %d; listing again", self.revision
                )
                await self._relist()
            except StoreError as error:
                _log.warning("the event feed's watch failed, retrying: %s", error)
                await asyncio.sleep(_RETRY_S)
            except Exception:
                # A bug must not leave followers with keepalives only: list again, go on.
                _log.exception("the event feed failed; listing again")
                await asyncio.sleep(_RETRY_S)
                await self._relist()

    async def _relist(self) -> None:
        while True:
            try:
                await self.list_at()
                return
            except StoreError as error:
                _log.warning("listing for the event feed failed, retrying: %s", error)
                await asyncio.sleep(_RETRY_S)

    def _apply(self, changes: list[WatchEvent]) -> None:
        revision = changes[0].revision
        change = Change(revision, datetime.now(UTC))
        events: list[RegionEvent] = []
        for watched in changes:
            kv = watched.kv
            source = self.source_of(kv.key)
            if source is None:
                continue
            before = self._digests.get(kv.key)
            after = None if watched.type is EventType.DELETE else source.digest(kv)
            if after is None:
                self._digests.pop(kv.key, None)
            else:
                self._digests[kv.key] = after
            events += source.events(kv.key, before, after, change)
        self.revision = revision
        self._deliver((revision, [self._owned(event) for event in events]))

    def _tell_differences(self, listed: dict[str, Hashable], revision: int) -> None:
        change = Change(revision, datetime.now(UTC))
        events: list[RegionEvent] = []
        for key in sorted(listed.keys() | self._digests.keys()):
            source = self.source_of(key)
            if source is not None:
                events += source.events(key, self._digests.get(key), listed.get(key), change)
        self._digests = listed
        self.revision = revision
        self._deliver((revision, [self._owned(event) for event in events]))

    def _owned(self, item: Owned) -> Owned:
        """A machine's event (or state) belongs to the entitlement the machine does, if any."""
        if item.entitlement is None and item.machine is not None:
            owner = self.owner(item.machine)
            if owner is not None:
                return item.model_copy(update={"entitlement": owner})
        return item


def _only(sources: Sequence[Source[Any]], kind: type[Source[Any]]) -> Source[Any]:
    found = [source for source in sources if isinstance(source, kind)]
    if len(found) != 1:
        raise ValueError(f"the event sources need exactly one {kind.__name__}")
    return found[0]
