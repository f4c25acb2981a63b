"""The frontend's shard tally, fed by its shared feed: one listing, then every change as it
happens."""

from __future__ import annotations

import asyncio
import logging

from tether.frontend.listing import wait_listed
from tether.frontend.shard_tally import KeyCount, OwnedMachines, ShardMap, ShardTally
from tether.store import keys
from tether.store.feed import FeedSink
from tether.store.shared_feed import SharedFeed

log = logging.getLogger(__name__)


class ShardCounts:
    """What each shard holds, from the sinks of the shard map, jobs, tasks, operations and
    allocation records on the frontend's `SharedFeed`: a shard request reads a `ShardTally`,
    not the store.

    Until the feed's first listing is in, `tally()` waits up to `wait_s`, then answers the 503
    problem. Each frontend process keeps counts of its own; they trail the store by the watch's
    delay, except that `wait_for` lets a request see its own writes.
    """

    def __init__(self, feed: SharedFeed, wait_s: float) -> None:
        self._feed = feed
        self._wait_s = wait_s
        self._tally = ShardTally()
        sinks: dict[str, FeedSink] = {
            keys.SHARD_MAP: ShardMap(self._tally),
            keys.JOBS: KeyCount(keys.JOBS, "jobs", self._tally),
            keys.TASKS: KeyCount(keys.TASKS, "tasks", self._tally),
            keys.OPERATIONS: KeyCount(keys.OPERATIONS, "operations", self._tally),
            keys.ALLOCATIONS: OwnedMachines(self._tally),
        }
        for prefix, sink in sinks.items():
            feed.subscribe(prefix, sink)

    async def tally(self) -> ShardTally:
        """The counts, once the feed has listed; 503 if that takes over `wait_s`."""
        what = "the store to count what each shard holds"
        await wait_listed(self._feed.listed, self._wait_s, self._feed.started_at, what)
        return self._tally

    @property
    def revision(self) -> int:
        """The counts hold every change up to this revision."""
        return self._feed.revision

    async def wait_for(self, revision: int) -> None:
        """Returns once the counts hold every change up to `revision`, or after `wait_s` if the
        watch lags that much: a request that wrote sees its own write, and one that cannot is
        not held up for long."""
        try:
            async with asyncio.timeout(self._wait_s):
                await self._feed.wait_for(revision)
        except TimeoutError:
            log.warning("shard counts: not yet at revision %d", revision)
