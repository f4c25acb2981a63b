"""List a prefix, then follow its watch, handing every key to a sink that decides what to keep."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from tether.aio import cancel_and_wait
from tether.store.base import CompactedError, EventType, KeyValue, Store, StoreError, Watch

_log = logging.getLogger(__name__)

# etcd counts the rest of the range on every page: big pages keep a listing linear.
_PAGE = 50_000
_RETRY_S = 0.5


class FeedSink(Protocol):
    """Where a feed's keys go; the sink decides what to keep of them."""

    def begin_listing(self) -> None:
        """A full listing starts: every key that exists comes in a page before `end_listing`."""

    def put(self, kv: KeyValue) -> None:
        """A key's current value, from the watch."""

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        """A page of the listing: each key's value as of the listing's revision."""

    def delete(self, key: str, revision: int) -> None:
        """A key was deleted at `revision`."""

    def end_listing(self, revision: int) -> None:
        """The listing at `revision` is complete: keys not put since `begin_listing` are gone."""


class PrefixFeed:
    """Every key under a prefix, handed to a sink: a listing, then the watch's changes.

    `start()` lists the prefix in pages of one snapshot and returns when the sink has all of it;
    a watch then follows from the next revision, and `after` (if given) runs once the changes of
    each revision, or of a listing after a compaction, are in the sink. A feed stopped and
    started again resumes from its revision (listing again if that history is gone).
    `PrefixMirror` is the feed whose sink keeps every key; the allocator's index keeps columns.
    """

    def __init__(
        self,
        store: Store,
        prefix: str,
        sink: FeedSink,
        after: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._store = store
        self.prefix = prefix
        self._sink = sink
        self._after = after
        self.revision = 0
        self._in_step = False
        self._watch: Watch | None = None
        self._advanced = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    @property
    def current(self) -> bool:
        """Whether the sink follows the store: after a listing or a change the watch delivered,
        while the watch is connected. Not from the moment the watch fails or loses its
        connection until it is back (a watch retried against a store that is gone, or cut
        off, delivers nothing, and the sink falls behind by any amount)."""
        return self._in_step and (self._watch is None or self._watch.connected)

    async def start(self, *, retry: bool = False) -> None:
        """Lists the prefix (unless resuming), then follows it; with `retry`, a listing that
        fails is tried again until it succeeds instead of raising the store's error."""
        if not self.revision:
            await (self._relist() if retry else self._list())
        self._task = asyncio.create_task(self._follow(), name=f"feed {self.prefix}")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def wait_for(self, revision: int) -> None:
        """Returns once the sink has every change up to `revision`."""
        async with self._advanced:
            await self._advanced.wait_for(lambda: self.revision >= revision)

    async def _list(self) -> None:
        self._sink.begin_listing()
        start_after: str | None = None
        revision = 0
        while True:
            page = await self._store.range(
                self.prefix, start_after=start_after, limit=_PAGE, revision=revision
            )
            revision = page.revision
            self._sink.put_page(page.kvs)
            if not page.more or not page.kvs:
                break
            start_after = page.kvs[-1].key
        self._sink.end_listing(revision)
        self._in_step = True
        await self._advance(revision)

    async def _advance(self, revision: int) -> None:
        async with self._advanced:
            self.revision = max(self.revision, revision)
            self._advanced.notify_all()

    async def _follow(self) -> None:
        while True:
            try:
                async with self._store.watch(
                    self.prefix, start_revision=self.revision + 1
                ) as watch:
                    self._watch = watch
                    try:
                        await self._apply(watch)
                    finally:
                        self._watch = None
            except CompactedError:
                self._in_step = False
                _log.info("watch on %s compacted; listing again", self.prefix)
                await self._relist()
                await self._changed()
            except StoreError as error:
                self._in_step = False
                _log.warning("watch on %s failed, retrying: %s", self.prefix, error)
                await asyncio.sleep(_RETRY_S)

    async def _apply(self, watch: Watch) -> None:
        async for events in watch:
            for event in events:
                if event.type is EventType.PUT:
                    self._sink.put(event.kv)
                else:
                    self._sink.delete(event.kv.key, event.revision)
            self._in_step = True
            await self._advance(events[-1].revision)
            await self._changed()

    async def _changed(self) -> None:
        if self._after is not None:
            await self._after()

    async def _relist(self) -> None:
        while True:
            try:
                await self._list()
                return
            except StoreError as error:
                _log.warning("listing %s failed, retrying: %s", self.prefix, error)
                await asyncio.sleep(_RETRY_S)
