"""One event feed per frontend, shared by everyone who follows: started by the first follower
(at the revision it resumes from, when the store still has it), kept for a while after the last
one leaves, with the latest events kept for followers that reconnect."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from tether.aio import cancel_and_wait
from tether.frontend.events.feed import Batch, EventFeed
from tether.model.event import RegionEvent, RegionObject
from tether.store import CompactedError, Store

_log = logging.getLogger(__name__)

MAX_REPLAY = 100_000
"""The most revisions back a feed starts at for a resuming follower; from further back it starts
at the store's revision, and the follower gets the state instead (a gap)."""


@dataclass(eq=False)
class Subscription:
    """One follower's events: those kept after the revision it resumed from, then each new
    revision's as it comes. `gap` says the revisions it asked for are no longer kept."""

    after: int
    backlog: list[Batch]
    gap: bool
    queue: asyncio.Queue[Batch | None] = field(default_factory=asyncio.Queue)
    """The revisions with events, then None when the subscription ends."""
    overflowed: bool = False
    """It fell `queue_limit` revisions behind: its stream ends, and it resumes from the kept
    events."""


class EventHub:
    """The shared feed, the events it keeps (`keep_events`, whole revisions) and its followers."""

    def __init__(
        self, store: Store, *, keep_events: int, idle_s: float, queue_limit: int = 10_000
    ) -> None:
        self._store = store
        self._keep_events = keep_events
        self._idle_s = idle_s
        self._queue_limit = queue_limit
        self._feed: EventFeed | None = None
        self._following: asyncio.Task[None] | None = None
        self._stopping: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()
        self._kept: deque[Batch] = deque()
        self._kept_events = 0
        self._floor = 0
        """Every revision after this one is kept."""
        self._subscriptions: set[Subscription] = set()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._closed = False

    @property
    def running(self) -> bool:
        return self._feed is not None

    @property
    def revision(self) -> int:
        return 0 if self._feed is None else self._feed.revision

    @property
    def floor(self) -> int:
        """Events of every revision after this one are kept (to replay to a reconnect)."""
        return self._floor

    @property
    def followers(self) -> int:
        return len(self._subscriptions)

    def members(self, entitlement: str) -> frozenset[str]:
        return frozenset() if self._feed is None else self._feed.members(entitlement)

    def recent(self, limit: int) -> list[RegionEvent]:
        """The latest `limit` events kept, oldest first (none while the feed does not run)."""
        found: list[RegionEvent] = []
        for _, events in reversed(self._kept):
            found[:0] = events
            if len(found) >= limit:
                break
        return found[-limit:]

    def objects(self) -> list[RegionObject]:
        """The state now of everything the feed follows."""
        return [] if self._feed is None else self._feed.objects()

    async def subscribe(self, after: int | None, now: int, *, kept: bool = False) -> Subscription:
        """A follower's subscription from after revision `after` (None: from `now`, the store's
        revision, or with `kept` from the oldest event kept). The feed starts if it does not
        run: at `after` when the store still has that revision and it is at most
        `MAX_REPLAY` revisions back, else at the store's revision."""
        # An idle stop not yet under way is called off; one under way holds the lock.
        await cancel_and_wait(self._stopping)
        self._stopping = None
        async with self._starting:
            if self._closed:
                # The frontend is stopping: the stream ends at once, its client goes elsewhere.
                ended = Subscription(after or now, [], gap=False)
                ended.queue.put_nowait(None)
                return ended
            if self._feed is None:
                replay = after is not None and now - after <= MAX_REPLAY
                await self._start(after if replay else None)
        if after is None:
            after = self._floor if kept else max(now, self._floor)
        # No await from here on: the backlog and the live events meet exactly.
        gap = after < self._floor
        backlog = [batch for batch in self._kept if batch[0] > after]
        subscription = Subscription(after, backlog, gap)
        self._subscriptions.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Ends the subscription (at once or after its stream ended: either is fine, and both
        happen)."""
        self._subscriptions.discard(subscription)
        if not self._subscriptions and self._feed is not None and self._stopping is None:
            self._stopping = asyncio.create_task(self._stop_when_idle(), name="event hub idle")

    async def wait_for(self, revision: int) -> None:
        """Returns once the feed has told every revision up to `revision` (or stopped)."""
        if self.revision >= revision or self._feed is None:
            return
        reached = asyncio.get_running_loop().create_future()
        self._waiters.append((revision, reached))
        await reached

    async def close(self) -> None:
        """Stops the feed and ends every stream (the HTTP server waits for open ones to end
        before it stops); later subscriptions end at once."""
        self._closed = True
        await cancel_and_wait(self._stopping)
        async with self._starting:
            await self._stop()

    async def _start(self, after: int | None) -> None:
        feed = EventFeed(self._store, self._keep)
        try:
            listed = await feed.list_at(after or 0)
        except CompactedError:
            listed = await feed.list_at()
        self._kept.clear()
        self._kept_events = 0
        self._floor = listed
        self._feed = feed
        self._following = asyncio.create_task(feed.follow(), name="event feed")
        _log.info("event feed started at revision %d", listed)

    async def _stop_when_idle(self) -> None:
        await asyncio.sleep(self._idle_s)
        # From here on a subscriber does not call the stop off: it waits for the lock, and
        # starts the feed again.
        self._stopping = None
        async with self._starting:
            if not self._subscriptions:
                await self._stop()

    async def _stop(self) -> None:
        following, self._following, self._feed = self._following, None, None
        await cancel_and_wait(following)
        for subscription in self._subscriptions:
            subscription.queue.put_nowait(None)
        self._wake(None)

    def _keep(self, batch: Batch) -> None:
        revision, events = batch
        self._wake(revision)
        if not events:
            return
        self._kept.append(batch)
        self._kept_events += len(events)
        while self._kept_events > self._keep_events and self._kept:
            dropped, old = self._kept.popleft()
            self._kept_events -= len(old)
            self._floor = dropped
        for subscription in list(self._subscriptions):
            if subscription.queue.qsize() < self._queue_limit:
                subscription.queue.put_nowait(batch)
                continue
            subscription.overflowed = True
            subscription.queue.put_nowait(None)
            self.unsubscribe(subscription)

    def _wake(self, revision: int | None) -> None:
        """Resolves the waiters for `revision` or earlier (all of them when None: stopped)."""
        waiting = []
        for wanted, reached in self._waiters:
            if revision is None or wanted <= revision:
                if not reached.done():
                    reached.set_result(None)
            else:
                waiting.append((wanted, reached))
        self._waiters = waiting
