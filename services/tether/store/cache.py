"""Copies of some prefixes of the store in memory, each kept by a watch of its own, and reads
served from them (`CachedReads`): what the frontend answers GET requests from, as the
kube-apiserver answers from its watch cache.

A copy follows only what it holds. The prefixes with a key per task (tasks, their statuses)
are copied one entitlement at a time, from the first read of that entitlement until nobody has
read it for a while: a frontend pays for the changes of what it is asked about, not for every
task of the region."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from itertools import islice

from sortedcontainers import SortedDict

from tether.aio import cancel_and_wait, every
from tether.store.base import Delete, KeyValue, Op, Put, RangeResult, Store
from tether.store.feed import PrefixFeed
from tether.store.keys import ROOT
from tether.store.wrapped import WrappedStore

_log = logging.getLogger(__name__)


class PrefixCopy:
    """Every key under `prefix`, in order, as of `revision`: a listing, then its watch."""

    def __init__(self, store: Store, prefix: str) -> None:
        self.prefix = prefix
        self.items: SortedDict[str, KeyValue] = SortedDict()
        self._listing: SortedDict[str, KeyValue] = SortedDict()
        self._feed = PrefixFeed(store, prefix, self)
        self._listed = False
        self._starting: asyncio.Task[None] | None = None
        self.last_read = time.monotonic()

    @property
    def revision(self) -> int:
        """Every change under the prefix up to this revision is in the copy (0: not listed)."""
        return self._feed.revision

    @property
    def current(self) -> bool:
        """Whether to answer from the copy: listed, and its watch not failed since it last
        delivered. A frontend cut off from the store does not serve what it held then as the
        store's state; it reads the store (and answers 503 when that fails too)."""
        return self._listed and self._feed.current

    def start(self) -> None:
        """Lists in the background (again while the store cannot be reached), then follows."""
        self._starting = asyncio.create_task(self._list(), name=f"cache of {self.prefix}")

    async def stop(self) -> None:
        await cancel_and_wait(self._starting)
        await self._feed.stop()

    async def wait_for(self, revision: int, timeout_s: float) -> bool:
        """Whether the copy holds every change up to `revision` within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._feed.wait_for(revision)
        except TimeoutError:
            return False
        return self.current

    async def _list(self) -> None:
        started = time.monotonic()
        await self._feed.start(retry=True)
        self._listed = True
        _log.debug("%s listed in %.2f s", self.prefix, time.monotonic() - started)

    # --- FeedSink ----------------------------------------------------------------------------

    def begin_listing(self) -> None:
        self._listing = SortedDict()

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        self._listing.update((kv.key, kv) for kv in kvs)

    def end_listing(self, revision: int) -> None:
        self.items, self._listing = self._listing, SortedDict()

    def put(self, kv: KeyValue) -> None:
        self.items[kv.key] = kv

    def delete(self, key: str, revision: int) -> None:
        self.items.pop(key, None)


class StoreCache:
    """Copies of `prefixes` (each whole, from `start()`) and of `per_entitlement` prefixes
    (each `<prefix><entitlement>/` on its own, from the first read of it until `idle_s`
    without one). Each copy is at a revision of its own.

    A compacted watch lists again: the cache never holds a key as current that the store
    deleted meanwhile.
    """

    def __init__(
        self,
        store: Store,
        prefixes: Sequence[str],
        per_entitlement: Sequence[str] = (),
        idle_s: float = 60.0,
    ) -> None:
        self._store = store
        self._whole = {prefix: PrefixCopy(store, prefix) for prefix in prefixes}
        self._per_entitlement = tuple(per_entitlement)
        self._of_entitlement: dict[str, PrefixCopy] = {}
        self._idle_s = idle_s
        self._reaping: asyncio.Task[None] | None = None

    @property
    def current(self) -> bool:
        """Whether every whole prefix is listed and followed."""
        return all(copy.current for copy in self._whole.values())

    @property
    def revision(self) -> int:
        """The newest revision any copy has reached: the store's is at least this."""
        copies = [*self._whole.values(), *self._of_entitlement.values()]
        return max((copy.revision for copy in copies), default=0)

    @property
    def entitlements_followed(self) -> int:
        """How many per-entitlement copies are kept now."""
        return len(self._of_entitlement)

    async def start(self) -> None:
        for copy in self._whole.values():
            copy.start()
        self._reaping = asyncio.create_task(
            every(self._idle_s / 2, self._drop_idle), name="cache reaper"
        )

    async def stop(self) -> None:
        await cancel_and_wait(self._reaping)
        copies = [*self._whole.values(), *self._of_entitlement.values()]
        self._of_entitlement.clear()
        for copy in copies:
            await copy.stop()

    def copy_of(self, prefix: str) -> PrefixCopy | None:
        """The copy that holds every key under `prefix` (a key, or a prefix of keys), started
        now if it is an entitlement's that nobody read lately; None if no copy holds them all."""
        for cached, copy in self._whole.items():
            if prefix.startswith(cached):
                return copy
        for cached in self._per_entitlement:
            if prefix.startswith(cached):
                entitlement, separator, _ = prefix[len(cached) :].partition("/")
                if not separator:
                    return None  # all the entitlements', or a part of one's name
                return self._entitlements_copy(cached + entitlement + "/")
        return None

    def _entitlements_copy(self, prefix: str) -> PrefixCopy:
        copy = self._of_entitlement.get(prefix)
        if copy is None:
            copy = self._of_entitlement[prefix] = PrefixCopy(self._store, prefix)
            copy.start()
        copy.last_read = time.monotonic()
        return copy

    async def _drop_idle(self) -> None:
        unread_since = time.monotonic() - self._idle_s
        for prefix, copy in list(self._of_entitlement.items()):
            if copy.last_read < unread_since:
                del self._of_entitlement[prefix]
                await copy.stop()


class Writes:
    """The newest revision at which this process wrote, overall (`newest`) and under each
    prefix of one or two segments below ROOT (`/tether/v1/jobs/`, `/tether/v1/tasks/<ent>/`,
    as deep as any copy's prefix): what a copy must reach before it answers this process's
    reads, so that it reads its own writes. Deeper scopes would name a job each, and grow with
    every job the process ever wrote."""

    _DEPTH = 2

    def __init__(self) -> None:
        self.newest = 0
        """The store's revision is at least this."""
        self._under: dict[str, int] = {}

    def note(self, ops: Sequence[Op], revision: int) -> None:
        self.newest = max(self.newest, revision)
        for op in ops:
            if isinstance(op, Put | Delete):
                for scope in _scopes(op.key, self._DEPTH):
                    if self._under.get(scope, 0) < revision:
                        self._under[scope] = revision

    def newest_under(self, prefix: str) -> int:
        return self._under.get(prefix, 0)


def _scopes(key: str, depth: int) -> list[str]:
    """The prefixes ending in "/" that `key` is under, below ROOT, of at most `depth` segments."""
    segments = key[len(ROOT) :].split("/")[:-1][:depth]
    return [ROOT + "/".join(segments[: n + 1]) + "/" for n in range(len(segments))]


class CachedReads(WrappedStore):
    """`inner` with `get`, `range` and `count` answered from `cache` where a copy holds the
    keys read and is at `min_revision` or later, and at this process's own last write under it
    (`writes`; waiting up to `wait_s` for that one, which its watch is sure to bring); each
    such read told to `on_read` with the copy's revision. Everything else goes to `inner`:
    writes, prefixes no copy holds, a copy behind `min_revision`, a range at another revision
    (the later pages of a listing the copy moved on from), and every read when `cache` is None.
    Closing it closes `inner`: it is a view to make per request, not to close."""

    def __init__(
        self,
        inner: Store,
        cache: StoreCache | None,
        on_read: Callable[[int], None],
        *,
        min_revision: int = 0,
        writes: Writes | None = None,
        wait_s: float = 0.0,
    ) -> None:
        super().__init__(inner)
        self._cache = cache
        self._on_read = on_read
        self._min_revision = min_revision
        self._writes = writes
        self._wait_s = wait_s

    async def _cached(self, prefix: str) -> PrefixCopy | None:
        """The copy to read `prefix` from; None when the read goes to `inner`."""
        copy = None if self._cache is None else self._cache.copy_of(prefix)
        if copy is None or not copy.current or copy.revision < self._min_revision:
            return None
        written = 0 if self._writes is None else self._writes.newest_under(copy.prefix)
        if copy.revision < written and not await copy.wait_for(written, self._wait_s):
            return None
        return copy

    async def get(self, key: str) -> KeyValue | None:
        copy = await self._cached(key)
        if copy is None:
            return await super().get(key)
        self._on_read(copy.revision)
        found: KeyValue | None = copy.items.get(key)
        return found

    async def range(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int = 0,
        revision: int = 0,
    ) -> RangeResult:
        copy = await self._cached(prefix)
        if copy is None or revision not in (0, copy.revision):
            return await super().range(
                prefix, start_after=start_after, limit=limit, revision=revision
            )
        held, revision = copy.items, copy.revision
        self._on_read(revision)
        keys_in = held.irange(
            start_after or prefix, _after_prefix(prefix), inclusive=(start_after is None, False)
        )
        selected = list(islice(keys_in, limit + 1)) if limit else list(keys_in)
        if limit and len(selected) > limit:
            return RangeResult([held[key] for key in selected[:limit]], revision, more=True)
        return RangeResult([held[key] for key in selected], revision)

    async def count(self, prefix: str) -> int:
        copy = await self._cached(prefix)
        if copy is None:
            return await super().count(prefix)
        self._on_read(copy.revision)
        held = copy.items
        return held.bisect_left(_after_prefix(prefix)) - held.bisect_left(prefix)


def _after_prefix(prefix: str) -> str:
    """The first string after every key that starts with `prefix` (keys are ASCII: their
    order as strings is etcd's order of bytes)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)
