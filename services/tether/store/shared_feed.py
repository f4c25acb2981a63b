"""One feed of a whole key range handed to every sink that subscribed to a prefix of it: a
process that keeps several views of the store (the frontend's cache, shard counts and queue
index) decodes each change once, from one watch, and its views agree on one revision."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from tether.aio import cancel_and_wait
from tether.store.base import KeyValue, Store
from tether.store.feed import FeedSink, PrefixFeed

_log = logging.getLogger(__name__)


class SharedFeed:
    """A `PrefixFeed` of `root` whose keys go to the sinks subscribed to prefixes of it (each
    sink sees only its prefix; a key may go to several sinks).

    Subscribe before `start()`, which returns at once and lists in the background (again
    while the store cannot be reached); `listed` is set once the first listing is in.
    """

    def __init__(self, store: Store, root: str) -> None:
        self.root = root
        self._routes: list[tuple[str, FeedSink]] = []
        self._feed = PrefixFeed(store, root, self)
        self.listed = asyncio.Event()
        self._starting: asyncio.Task[None] | None = None
        self._started_at = 0.0

    def subscribe(self, prefix: str, sink: FeedSink) -> None:
        if not prefix.startswith(self.root):
            raise ValueError(f"{prefix!r} is not under the feed's root {self.root!r}")
        self._routes.append((prefix, sink))

    @property
    def revision(self) -> int:
        """Every change up to this revision is in the sinks (0: not listed yet)."""
        return self._feed.revision

    @property
    def current(self) -> bool:
        """Whether the sinks follow the store now (`PrefixFeed.current`)."""
        return self.listed.is_set() and self._feed.current

    @property
    def started_at(self) -> float:
        """When `start()` was called, by the monotonic clock."""
        return self._started_at

    async def start(self) -> None:
        self._started_at = time.monotonic()
        self._starting = asyncio.create_task(self._list(), name=f"shared feed {self.root}")

    async def stop(self) -> None:
        await cancel_and_wait(self._starting)
        await self._feed.stop()

    async def wait_for(self, revision: int) -> None:
        """Returns once the sinks have every change up to `revision`."""
        await self.listed.wait()
        await self._feed.wait_for(revision)

    async def _list(self) -> None:
        await self._feed.start(retry=True)
        self.listed.set()
        _log.info("%s listed in %.1f s", self.root, time.monotonic() - self._started_at)

    # --- FeedSink: each call to the sinks of the prefixes it concerns -------------------------

    def begin_listing(self) -> None:
        for _, sink in self._routes:
            sink.begin_listing()

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        for prefix, sink in self._routes:
            sink.put_page([kv for kv in kvs if kv.key.startswith(prefix)])

    def end_listing(self, revision: int) -> None:
        for _, sink in self._routes:
            sink.end_listing(revision)

    def put(self, kv: KeyValue) -> None:
        for prefix, sink in self._routes:
            if kv.key.startswith(prefix):
                sink.put(kv)

    def delete(self, key: str, revision: int) -> None:
        for prefix, sink in self._routes:
            if key.startswith(prefix):
                sink.delete(key, revision)
