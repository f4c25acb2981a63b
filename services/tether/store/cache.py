"""A copy of some prefixes of the store in memory, kept by one watch, and reads served from it at
a known revision (`CachedReads`): what the frontend answers GET requests from, as the
kube-apiserver answers from its watch cache."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from itertools import islice
from typing import TypeVar

from sortedcontainers import SortedDict

from tether.aio import cancel_and_wait
from tether.store.base import KeyValue, RangeResult, Store
from tether.store.feed import PrefixFeed
from tether.store.wrapped import WrappedStore

_log = logging.getLogger(__name__)

T = TypeVar("T")


class StoreCache:
    """Every key under `prefixes` (each under `root`), as of `revision`, from one watch of
    `root`: one revision for all of them, so that reads of several prefixes agree.

    `start()` returns at once and lists in the background (again while the store cannot be
    reached); `listed` is set once a listing is in. A compacted watch lists again: the cache
    never holds a key as current that the store deleted meanwhile.
    """

    def __init__(self, store: Store, root: str, prefixes: Sequence[str]) -> None:
        if not all(prefix.startswith(root) for prefix in prefixes):
            raise ValueError(f"every cached prefix must be under {root!r}: {prefixes}")
        self.prefixes = tuple(prefixes)
        self._items: dict[str, SortedDict[str, KeyValue]] = {p: SortedDict() for p in prefixes}
        self._listing: dict[str, SortedDict[str, KeyValue]] = {}
        self._feed = PrefixFeed(store, root, self)
        self.listed = asyncio.Event()
        self._starting: asyncio.Task[None] | None = None

    @property
    def revision(self) -> int:
        """Every change up to this revision is in the cache (0: not listed yet)."""
        return self._feed.revision

    @property
    def current(self) -> bool:
        """Whether to answer from the cache: listed, and its watch not failed since it last
        delivered. A frontend cut off from the store does not serve what it held then as the
        store's state; it reads the store (and answers 503 when that fails too)."""
        return self.listed.is_set() and self._feed.current

    async def start(self) -> None:
        self._starting = asyncio.create_task(self._list(), name="store cache")

    async def stop(self) -> None:
        await cancel_and_wait(self._starting)
        await self._feed.stop()

    async def wait_for(self, revision: int, timeout_s: float) -> bool:
        """Whether the cache holds every change up to `revision` within `timeout_s`."""
        if self.current and self.revision >= revision:
            return True
        try:
            async with asyncio.timeout(timeout_s):
                await self.listed.wait()
                await self._feed.wait_for(revision)
        except TimeoutError:
            return False
        return True

    def holding(self, prefix: str) -> SortedDict[str, KeyValue] | None:
        """The cached keys of the cached prefix that `prefix` is in, or None if none is."""
        for cached in self.prefixes:
            if prefix.startswith(cached):
                return self._items[cached]
        return None

    async def _list(self) -> None:
        started = time.monotonic()
        await self._feed.start(retry=True)
        self.listed.set()
        _log.info("store cache listed in %.1f s", time.monotonic() - started)

    # --- FeedSink ----------------------------------------------------------------------------

    def begin_listing(self) -> None:
        self._listing = {prefix: SortedDict() for prefix in self.prefixes}

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        for kv in kvs:
            for prefix, listing in self._listing.items():
                if kv.key.startswith(prefix):
                    listing[kv.key] = kv
                    break

    def end_listing(self, revision: int) -> None:
        self._items, self._listing = self._listing, {}

    def put(self, kv: KeyValue) -> None:
        held = self.holding(kv.key)
        if held is not None:
            held[kv.key] = kv

    def delete(self, key: str, revision: int) -> None:
        held = self.holding(key)
        if held is not None:
            held.pop(key, None)


class CachedReads(WrappedStore):
    """`inner` with `get`, `range` and `count` of the cached prefixes answered from `cache` at
    its revision once it is listed, each such read told to `on_read` with that revision;
    everything else goes to `inner`: writes, other prefixes, a range at another revision (the
    later pages of a listing the cache moved on from), and every read when `cache` is None.
    Closing it closes `inner`: it is a view to make per request, not to close."""

    def __init__(
        self, inner: Store, cache: StoreCache | None, on_read: Callable[[int], None]
    ) -> None:
        super().__init__(inner)
        self._cache = cache
        self._on_read = on_read

    def _cached(self, prefix: str) -> tuple[SortedDict[str, KeyValue], int] | None:
        """The cached keys of `prefix`'s cached prefix and the cache's revision; None when the
        read goes to `inner`."""
        cache = self._cache
        if cache is None or not cache.current:
            return None
        held = cache.holding(prefix)
        return None if held is None else (held, cache.revision)

    async def get(self, key: str) -> KeyValue | None:
        cached = self._cached(key)
        if cached is None:
            return await super().get(key)
        held, revision = cached
        self._on_read(revision)
        found: KeyValue | None = held.get(key)
        return found

    async def range(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int = 0,
        revision: int = 0,
    ) -> RangeResult:
        cached = self._cached(prefix)
        if cached is None or revision not in (0, cached[1]):
            return await super().range(
                prefix, start_after=start_after, limit=limit, revision=revision
            )
        held, revision = cached
        self._on_read(revision)
        keys_in = held.irange(
            start_after or prefix, _after_prefix(prefix), inclusive=(start_after is None, False)
        )
        selected = list(islice(keys_in, limit + 1)) if limit else list(keys_in)
        if limit and len(selected) > limit:
            return RangeResult([held[key] for key in selected[:limit]], revision, more=True)
        return RangeResult([held[key] for key in selected], revision)

    async def count(self, prefix: str) -> int:
        cached = self._cached(prefix)
        if cached is None:
            return await super().count(prefix)
        held, revision = cached
        self._on_read(revision)
        return held.bisect_left(_after_prefix(prefix)) - held.bisect_left(prefix)


def _after_prefix(prefix: str) -> str:
    """The first string after every key that starts with `prefix` (keys are ASCII: their
    order as strings is etcd's order of bytes)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)
