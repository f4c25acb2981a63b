"""The frontend's shard tally, fed by watches: one listing, then every change as it happens."""

from __future__ import annotations

import asyncio
import logging
import time

from tether.aio import cancel_and_wait
from tether.frontend.listing import wait_listed
from tether.frontend.shard_tally import KeyCount, OwnedMachines, ShardMap, ShardTally
from tether.store import Store, keys
from tether.store.feed import FeedSink, PrefixFeed

log = logging.getLogger(__name__)


class ShardCounts:
    """What each shard holds, from `PrefixFeed`s of the shard map, jobs, tasks, operations
    and allocation records: a shard request reads a `ShardTally`, not the store.

    `start()` returns at once; the listings run in the background (again and again while the
    store cannot be reached). Until they are all in, `tally()` waits up to `wait_s`, then
    answers the 503 problem. Each frontend process keeps counts of its own; they trail the
    store by the watch's delay, except that `wait_for` lets a request see its own writes.
    """

    def __init__(self, store: Store, wait_s: float) -> None:
        self._wait_s = wait_s
        self._tally = ShardTally()
        sinks: dict[str, FeedSink] = {
            keys.SHARD_MAP: ShardMap(self._tally),
            keys.JOBS: KeyCount(keys.JOBS, "jobs", self._tally),
            keys.TASKS: KeyCount(keys.TASKS, "tasks", self._tally),
            keys.OPERATIONS: KeyCount(keys.OPERATIONS, "operations", self._tally),
            keys.ALLOCATIONS: OwnedMachines(self._tally),
        }
        self._feeds = {prefix: PrefixFeed(store, prefix, sink) for prefix, sink in sinks.items()}
        self._listed = asyncio.Event()
        self._starting: asyncio.Task[None] | None = None
        self._started_at = 0.0

    async def start(self) -> None:
        self._started_at = time.monotonic()
        self._starting = asyncio.create_task(self._start_feeds(), name="shard counts")

    async def stop(self) -> None:
        await cancel_and_wait(self._starting)
        for feed in self._feeds.values():
            await feed.stop()

    async def tally(self) -> ShardTally:
        """The counts, once every prefix has been listed; 503 if that takes over `wait_s`."""
        what = "the store to count what each shard holds"
        await wait_listed(self._listed, self._wait_s, self._started_at, what)
        return self._tally

    def revision(self, prefix: str) -> int:
        """The last revision of `prefix`'s changes in the counts (one of the counted prefixes:
        keys.SHARD_MAP, JOBS, TASKS, OPERATIONS, ALLOCATIONS)."""
        return self._feeds[prefix].revision

    async def wait_for(self, prefix: str, revision: int) -> None:
        """Returns once the counts hold `prefix`'s changes up to `revision` (a revision that
        changed a key under it), or after `wait_s` if the watch lags that much: a request
        that wrote there sees its own write, and one that cannot is not held up for long."""
        try:
            async with asyncio.timeout(self._wait_s):
                await self._feeds[prefix].wait_for(revision)
        except TimeoutError:
            log.warning("shard counts: %s not yet at revision %d", prefix, revision)

    async def _start_feeds(self) -> None:
        await asyncio.gather(*(feed.start(retry=True) for feed in self._feeds.values()))
        self._listed.set()
        log.info("shard counts listed in %.1f s", time.monotonic() - self._started_at)
