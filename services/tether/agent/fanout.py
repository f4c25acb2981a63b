"""A store shared by thousands of agents in one process: shared watches and lease, bounded load."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Final, TypeVar

from tether.aio import cancel_and_wait
from tether.store import (
    CompactedError,
    LeaseNotFound,
    Store,
    StoreError,
    Watch,
    WatchEvent,
)
from tether.store.lease import LeaseKeeper
from tether.store.wrapped import WrappedStore

_log = logging.getLogger(__name__)

T = TypeVar("T")

HISTORY_EVENTS: Final = 20_000
"""Changes a shared watch keeps (whole revisions, the newest always), for a watch that starts
behind it (an agent lists its prefix, then watches from the listing's revision); one that
starts further back is told the history is gone, and lists again. Counted in changes, not
revisions: an allocator's revision can hold thousands."""
RETRY_S: Final = 0.5
IN_FLIGHT: Final = 256
"""Requests a `FleetStore` has in flight at once; more wait their turn in Python, where waiting
is cheap (gRPC's cost per call grows with the calls it has open)."""


class SharedWatches:
    """One watch per prefix of `parents`, through `store`, serving every watch on a prefix under
    one of them: the watches of all the agents of a process, whichever store each talks through.

    Shared prefixes must end at a key segment (with or without its slash), which every agent
    prefix does: a change goes to the watches on the prefixes of its key that end at a slash or
    just before one. `stop()` ends the shared watches; the store stays open.
    """

    def __init__(self, store: Store, parents: Sequence[str]) -> None:
        self._hubs = {parent: _Hub(store, parent) for parent in parents}

    def watch(self, prefix: str, *, start_revision: int) -> Watch | None:
        """A watch on `prefix` fed by its parent's shared watch; None outside every parent."""
        for parent, hub in self._hubs.items():
            if prefix.startswith(parent) and prefix != parent:
                return _SharedWatch(hub, prefix, start_revision)
        return None

    async def stop(self) -> None:
        for hub in self._hubs.values():
            await hub.stop()


class FleetStore(WrappedStore):
    """`inner` for thousands of agents of one process: a watch under one of `shared`'s parents
    is served by its shared watch, every lease granted is one shared lease, and at most
    `in_flight` requests are sent at once.

    A real agent has its own connection and lease, and etcd matches each change to its
    watchers. Here thousands of agents share a process: two watch streams each would cost the
    process a core while idle (gRPC with 20,000 streams open); a lease each, renewed with a
    stream per renewal, took the process's whole CPU at 10,000 agents until leases lapsed by
    the thousand; and thousands of requests at once make each request slower. So the process
    matches changes to watches itself (one `SharedWatches` for all its stores: a watch per
    store would decode every change once per store), and its agents' heartbeats live on one
    lease that this store keeps, as they live and die with the process. An agent renewing it
    is told its TTL (or that it is gone, once it lapsed: the agent registers again, on a new
    one); revoking it does nothing until the store closes. Closing this store revokes the
    shared lease and closes nothing else: its owner closes `inner` and stops `shared`.
    """

    def __init__(self, inner: Store, shared: SharedWatches, in_flight: int = IN_FLIGHT) -> None:
        super().__init__(inner)
        self._shared = shared
        self._slots = asyncio.Semaphore(in_flight)
        self._lease: LeaseKeeper | None = None
        self._granting = asyncio.Lock()

    def watch(self, prefix: str, *, start_revision: int) -> Watch:
        shared = self._shared.watch(prefix, start_revision=start_revision)
        if shared is not None:
            return shared
        return self.inner.watch(prefix, start_revision=start_revision)

    async def close(self) -> None:
        if self._lease is not None:
            await self._lease.stop(revoke=True)

    # --- the shared lease ----------------------------------------------------------------------

    async def lease_grant(self, ttl_s: int) -> int:
        """The shared lease, granted with the first TTL asked for (and again once it lapsed)."""
        async with self._granting:
            if self._lease is None or self._lease.lost.is_set():
                if self._lease is not None:
                    await self._lease.stop(revoke=False)
                keeper = LeaseKeeper(self.inner, ttl_s)
                await keeper.start()
                self._lease = keeper
            return self._lease.lease

    async def lease_keepalive(self, lease: int) -> int:
        keeper = self._lease
        if keeper is not None and keeper.lease == lease and not keeper.lost.is_set():
            return keeper.ttl_s
        if keeper is not None and keeper.lease == lease:
            raise LeaseNotFound(lease)
        return await self._around("lease_keepalive", lambda: self.inner.lease_keepalive(lease))

    async def lease_revoke(self, lease: int) -> None:
        if self._lease is not None and self._lease.lease == lease:
            return
        await self._around("lease_revoke", lambda: self.inner.lease_revoke(lease))

    # --- everything else goes to `inner`, a bounded number at a time --------------------------

    async def _around(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        async with self._slots:
            try:
                return await call()
            except LeaseNotFound as error:
                # A heartbeat put on the shared lease after it lapsed, before its keeper noticed:
                # the next agent to register gets a new one.
                if self._lease is not None and self._lease.lease == error.lease:
                    self._lease.lost.set()
                raise


class _Hub:
    """The one watch on `parent`, its recent history, and the watches it feeds."""

    def __init__(self, store: Store, parent: str) -> None:
        self._store = store
        self.parent = parent
        self.position = 0
        """Every revision before it has been handed out; 0 before the first watch."""
        self._history: deque[list[WatchEvent]] = deque()
        self._history_events = 0
        self._watches: dict[str, set[_SharedWatch]] = {}
        self._task: asyncio.Task[None] | None = None

    def subscribe(self, watch: _SharedWatch) -> None:
        """Starts feeding `watch`, first from the history when it starts behind."""
        if self._task is None:
            self.position = watch.next_revision
            self._task = asyncio.create_task(self._follow(), name=f"shared watch {self.parent}")
        elif watch.next_revision < self.position:
            oldest = self._history[0][0].revision if self._history else self.position
            if watch.next_revision < oldest:
                watch.fail(CompactedError(watch.next_revision, oldest))
                return
            for events in self._history:
                mine = [e for e in events if watch.prefix in _segment_prefixes(e.kv.key, 0)]
                if mine:
                    watch.offer(mine)
        self._watches.setdefault(watch.prefix, set()).add(watch)

    def unsubscribe(self, watch: _SharedWatch) -> None:
        watches = self._watches.get(watch.prefix)
        if watches is not None:
            watches.discard(watch)
            if not watches:
                del self._watches[watch.prefix]

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _follow(self) -> None:
        while True:
            try:
                async with self._store.watch(self.parent, start_revision=self.position) as watch:
                    async for events in watch:
                        self._remember(events)
                        self.position = events[-1].revision + 1
                        self._hand_out(events)
            except CompactedError as error:
                # Every watch lists again and comes back; the next one starts the hub anew.
                _log.warning("shared watch on %s compacted: %s", self.parent, error)
                for watches in self._watches.values():
                    for watch in watches:
                        watch.fail(error)
                self._watches.clear()
                self._history.clear()
                self._history_events = 0
                self._task = None
                return
            except StoreError as error:
                _log.warning("shared watch on %s failed, retrying: %s", self.parent, error)
                await asyncio.sleep(RETRY_S)

    def _remember(self, events: list[WatchEvent]) -> None:
        self._history.append(events)
        self._history_events += len(events)
        while self._history_events > HISTORY_EVENTS and len(self._history) > 1:
            self._history_events -= len(self._history.popleft())

    def _hand_out(self, events: list[WatchEvent]) -> None:
        by_watch: dict[_SharedWatch, list[WatchEvent]] = {}
        for event in events:
            for prefix in _segment_prefixes(event.kv.key, len(self.parent)):
                for watch in self._watches.get(prefix, ()):
                    by_watch.setdefault(watch, []).append(event)
        for watch, mine in by_watch.items():
            watch.offer(mine)


def _segment_prefixes(key: str, start: int) -> list[str]:
    """The prefixes of `key` that end at a slash or just before one (from the slash at `start`
    or after it), and `key` itself."""
    prefixes: list[str] = []
    slash = key.find("/", start)
    while slash != -1:
        prefixes += (key[:slash], key[: slash + 1])
        slash = key.find("/", slash + 1)
    prefixes.append(key)
    return prefixes


class _SharedWatch(Watch):
    """One watch fed by a hub: its revisions wait in a queue until the watch's owner reads."""

    def __init__(self, hub: _Hub, prefix: str, start_revision: int) -> None:
        super().__init__(prefix, start_revision)
        self._hub = hub
        self._queue: asyncio.Queue[list[WatchEvent] | StoreError] = asyncio.Queue()
        hub.subscribe(self)

    def offer(self, events: list[WatchEvent]) -> None:
        """Queues the changes of one revision, unless they are older than the watch."""
        if events[0].revision >= self.next_revision:
            self._queue.put_nowait(events)

    def fail(self, error: StoreError) -> None:
        self._queue.put_nowait(error)

    async def _revisions(self) -> AsyncIterator[list[WatchEvent]]:
        while True:
            item = await self._queue.get()
            if isinstance(item, StoreError):
                raise item
            self.next_revision = item[0].revision + 1
            yield item

    async def close(self) -> None:
        self._hub.unsubscribe(self)
