"""The etcd client's two long-lived streams: every watch of one store client on one gRPC Watch
stream, and every lease renewal on one LeaseKeepAlive stream.

A stream each per watch and per renewal would cost a gRPC call apiece: memory per watch, and
CPU per renewal. etcd multiplexes watches on a stream by watch id, and answers renewals in
order, so one of each serves a whole process.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import grpc
import grpc.aio
from aetcd import rpc

from tether.aio import cancel_and_wait
from tether.store.base import (
    CompactedError,
    EventType,
    KeyValue,
    LeaseNotFound,
    StoreError,
    StoreUnavailable,
    WatchEvent,
    prefix_end,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

Stubs = Any
"""The store's `_Stubs`: `.watch` and `.lease` stubs on its current channel."""
Connect = Callable[[], Awaitable[Stubs]]
Metadata = Callable[[], tuple[tuple[str, str], ...]]

RETRYABLE: Final = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
_EVENT_TYPE: Final = {rpc.Event.PUT: EventType.PUT, rpc.Event.DELETE: EventType.DELETE}
_BACKOFF_S: Final = (0.1, 2.0)
"""First and longest pause before opening a broken watch stream again."""


Dropped = Callable[[], bool]
"""Whether the stream call was dropped (cancelled on purpose, to be opened again)."""


async def on_stream(step: Awaitable[T], dropped: Dropped) -> T:
    """`step` of a stream call; StoreUnavailable when the call was dropped meanwhile.

    Cancelling a gRPC call raises CancelledError in the task awaiting it, though nobody
    cancelled that task (`cancelling()` stays 0): that one is turned into StoreUnavailable. A
    task cancelled from outside stays cancelled even when its call was dropped as well: a
    loop that retries on the store's errors would otherwise never end, nor anyone waiting
    for it to.
    """
    try:
        return await step
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not dropped() or task is None or task.cancelling():
            raise
        raise StoreUnavailable("the stream was dropped") from None
    except asyncio.InvalidStateError as exc:
        raise StoreUnavailable(f"the stream was dropped: {exc}") from None


_OVERLOADED: Final = "etcdserver: too many requests"
"""etcd's refusal while its apply backlog is over 5,000 entries (RESOURCE_EXHAUSTED): busy, not
wrong, so a caller should try again later like any unavailable store."""


def translate(exc: grpc.aio.AioRpcError, what: str) -> StoreError:
    """The store error a failed etcd call stands for."""
    code, details = exc.code(), exc.details() or ""
    if code in RETRYABLE or (code is grpc.StatusCode.RESOURCE_EXHAUSTED and _OVERLOADED in details):
        return StoreUnavailable(f"etcd unavailable during {what}: {details or code.name}")
    if "required revision has been compacted" in details:
        return CompactedError(0, None)
    if "lease not found" in details:
        return LeaseNotFound(0)
    return StoreError(f"etcd refused {what}: {details or code.name}")


def kv_of(kv: Any) -> KeyValue:
    return KeyValue(
        key=kv.key.decode(),
        value=bytes(kv.value),
        create_revision=int(kv.create_revision),
        mod_revision=int(kv.mod_revision),
        version=int(kv.version),
        lease=int(kv.lease),
    )


@dataclass(eq=False)
class Subscription:
    """One watch on the shared stream: what it asked for, and what arrived for it."""

    watch_id: int
    prefix: str
    resume_revision: int
    """The first revision not yet received: where the watch is created again after a break."""
    received: asyncio.Queue[list[WatchEvent] | StoreError | None] = field(
        default_factory=asyncio.Queue
    )
    """Each revision, in order; then an error that ended the watch, or None once it closed."""


class WatchStream:
    """Every watch of a store client on one etcd Watch stream, each under a watch id of its own.

    A broken stream is opened again (on whatever member the store then talks to) and every watch
    is created anew from the first revision it has not received, so each revision arrives
    exactly once. Needs etcd 3.4 or newer (client-chosen watch ids).
    """

    def __init__(self, connect: Connect, metadata: Metadata) -> None:
        self._connect = connect
        self._metadata = metadata
        self._ids = itertools.count(1)
        self._subscriptions: dict[int, Subscription] = {}
        self._call: Any = None
        self._follower: asyncio.Task[None] | None = None
        self._opened = asyncio.Event()
        self._writing = asyncio.Lock()
        """gRPC takes one write at a time on a stream."""

    @property
    def opened(self) -> bool:
        """Whether the stream is open on a member, every watch created on it."""
        return self._opened.is_set()

    async def subscribe(self, prefix: str, start_revision: int) -> Subscription:
        subscription = Subscription(next(self._ids), prefix, start_revision)
        self._subscriptions[subscription.watch_id] = subscription
        if self._follower is None or self._follower.done():
            self._opened.clear()
            self._follower = asyncio.create_task(self._follow(), name="etcd watch stream")
        elif self._opened.is_set():
            await self._create(self._call, subscription)
        return subscription

    async def unsubscribe(self, subscription: Subscription) -> None:
        """Ends the watch: its consumer sees the end once it has taken what arrived before."""
        if self._subscriptions.pop(subscription.watch_id, None) is None:
            return
        subscription.received.put_nowait(None)
        call = self._call
        if call is not None and self._opened.is_set():
            cancel = rpc.WatchCancelRequest(watch_id=subscription.watch_id)
            try:
                await self._write(call, rpc.WatchRequest(cancel_request=cancel))
            except (grpc.aio.AioRpcError, StoreUnavailable) as exc:
                log.debug("cancelling watch %d: %s", subscription.watch_id, exc)
        if not self._subscriptions:
            await self.close()

    def reopen(self) -> None:
        """Drops the stream and opens another, on the store's current member. The task that
        follows the stream is cancelled and replaced: cancelling only the gRPC call does not
        wake a read that waits for the channel to connect."""
        old = self._follower
        if old is None or old.done():
            return
        old.cancel()
        self._opened.clear()
        self._call = None
        self._follower = asyncio.create_task(self._follow(after=old), name="etcd watch stream")

    async def close(self) -> None:
        follower, self._follower = self._follower, None
        await cancel_and_wait(follower)

    async def _write(self, call: Any, request: Any) -> None:
        async with self._writing:
            await on_stream(call.write(request), lambda: self._call is not call or call.done())

    async def _create(self, call: Any, subscription: Subscription) -> None:
        create = rpc.WatchCreateRequest(
            key=subscription.prefix.encode(),
            range_end=prefix_end(subscription.prefix),
            start_revision=subscription.resume_revision,
            watch_id=subscription.watch_id,
        )
        await self._write(call, rpc.WatchRequest(create_request=create))

    async def _follow(self, after: asyncio.Task[None] | None = None) -> None:
        """Follows the stream (once `after`, a follower being cancelled, has ended)."""
        if after is not None:
            await asyncio.gather(after, return_exceptions=True)
        backoff, max_backoff = _BACKOFF_S
        while self._subscriptions:
            try:
                await self._stream()
                return
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in RETRYABLE:
                    self._fail_all(translate(exc, "watch"))
                    return
                log.info("etcd watch stream broke (%s); opening it again", exc.code().name)
            except StoreUnavailable as exc:
                log.info("etcd watch stream broke (%s); opening it again", exc)
            finally:
                self._opened.clear()
                self._call = None
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, max_backoff)

    async def _stream(self) -> None:
        stubs = await self._connect()
        call = stubs.watch.Watch(metadata=self._metadata(), wait_for_ready=True)
        self._call = call
        try:
            created: set[int] = set()
            while todo := [s for i, s in self._subscriptions.items() if i not in created]:
                for subscription in todo:
                    await self._create(call, subscription)
                    created.add(subscription.watch_id)
            # No await since the last check: a watch subscribed from here on creates itself.
            self._opened.set()
            while self._subscriptions:
                response = await call.read()
                if response is grpc.aio.EOF:  # type: ignore[attr-defined]
                    raise StoreUnavailable("etcd ended the watch stream")
                self._deliver(response)
        finally:
            call.cancel()

    def _deliver(self, response: Any) -> None:
        subscription = self._subscriptions.get(int(response.watch_id))
        if subscription is None:
            return  # cancelled meanwhile
        if response.compact_revision:
            self._end(subscription, CompactedError(subscription.resume_revision, None))
            return
        if response.canceled:
            reason = response.cancel_reason
            self._end(subscription, StoreError(f"etcd cancelled the watch: {reason}"))
            return
        # etcd sends every event of a revision in one response (no fragments are asked for);
        # a response may hold several revisions.
        revisions: list[list[WatchEvent]] = []
        for event in response.events:
            kv = kv_of(event.kv)
            if event.type == rpc.Event.DELETE:
                kv = KeyValue(kv.key, b"", 0, kv.mod_revision, 0)
            if not revisions or revisions[-1][0].revision != kv.mod_revision:
                revisions.append([])
            revisions[-1].append(WatchEvent(_EVENT_TYPE[event.type], kv))
        for events in revisions:
            subscription.resume_revision = events[0].revision + 1
            subscription.received.put_nowait(events)

    def _end(self, subscription: Subscription, error: StoreError) -> None:
        self._subscriptions.pop(subscription.watch_id, None)
        subscription.received.put_nowait(error)

    def _fail_all(self, error: StoreError) -> None:
        for subscription in list(self._subscriptions.values()):
            self._end(subscription, error)


async def revisions_of(
    stream: WatchStream, subscription: Subscription
) -> AsyncIterator[list[WatchEvent]]:
    """The revisions received for `subscription`, until it fails; unsubscribes at the end."""
    try:
        while True:
            received = await subscription.received.get()
            if received is None:
                return
            if isinstance(received, StoreError):
                raise received
            yield received
    finally:
        await stream.unsubscribe(subscription)


class KeepAliveStream:
    """Every lease renewal of a store client on one LeaseKeepAlive stream. etcd answers each
    request on the stream in order, with the lease's id; a broken stream fails the renewals
    waiting on it, and the next renewal opens a new one."""

    def __init__(self, connect: Connect, metadata: Metadata) -> None:
        self._connect = connect
        self._metadata = metadata
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, collections.deque[asyncio.Future[int]]] = {}
        self._opening = asyncio.Lock()
        self._writing = asyncio.Lock()

    async def renew(self, lease: int, timeout_s: float) -> int:
        """Renews `lease` once; its TTL as etcd granted it again. LeaseNotFound when it is gone,
        StoreUnavailable when no answer comes within `timeout_s` (the stream is then dropped:
        the next renewal opens another, on the store's current member)."""
        call = await self._open()
        answer: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(lease, collections.deque()).append(answer)
        try:
            dropped = lambda: self._call is not call  # noqa: E731 (reset drops the stream)
            async with self._writing:
                await on_stream(call.write(rpc.LeaseKeepAliveRequest(ID=lease)), dropped)
            async with asyncio.timeout(timeout_s):
                ttl = await on_stream(answer, dropped)
        except (grpc.aio.AioRpcError, StoreUnavailable, TimeoutError) as exc:
            error = StoreUnavailable(f"etcd lease keepalive failed: {exc!r}")
            self.reset(error, call)
            raise error from exc
        finally:
            self._forget(lease, answer)
        if ttl <= 0:
            raise LeaseNotFound(lease)
        return ttl

    def _forget(self, lease: int, answer: asyncio.Future[int]) -> None:
        queue = self._waiting.get(lease)
        if queue is not None and answer in queue:
            queue.remove(answer)
            if not queue:
                del self._waiting[lease]

    async def _open(self) -> Any:
        async with self._opening:
            if self._call is None:
                stubs = await self._connect()
                self._call = stubs.lease.LeaseKeepAlive(
                    metadata=self._metadata(), wait_for_ready=True
                )
                self._reader = asyncio.create_task(self._read(self._call), name="etcd keepalive")
            return self._call

    async def _read(self, call: Any) -> None:
        try:
            while True:
                response = await on_stream(call.read(), lambda: self._call is not call)
                if response is grpc.aio.EOF:  # type: ignore[attr-defined]
                    raise StoreUnavailable("etcd ended the lease keepalive stream")
                queue = self._waiting.get(int(response.ID))
                if queue:
                    answer = queue.popleft()
                    if not answer.done():
                        answer.set_result(int(response.TTL))
        except grpc.aio.AioRpcError as exc:
            self.reset(translate(exc, "lease keepalive"), call)
        except StoreUnavailable as exc:
            self.reset(exc, call)

    def reset(self, error: StoreError, call: Any = None) -> None:
        """Fails every renewal waiting for an answer and drops the stream (only `call`'s, when
        given: a newer stream is left alone)."""
        if call is not None and call is not self._call:
            return
        if self._call is not None:
            self._call.cancel()
        self._call = None
        # Its read may not wake when the call is cancelled (a channel that has not connected).
        if self._reader is not None and self._reader is not asyncio.current_task():
            self._reader.cancel()
        for queue in self._waiting.values():
            for answer in queue:
                if not answer.done():
                    answer.set_exception(error)
        self._waiting.clear()

    async def close(self) -> None:
        self.reset(StoreUnavailable("the store is closed"))
        reader, self._reader = self._reader, None
        await cancel_and_wait(reader)
