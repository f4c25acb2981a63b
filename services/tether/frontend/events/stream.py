"""A follower's events as Server-Sent Events: those it asked for that its principal may see, from
after the revision it last saw; when those are no longer kept, an error and the state now."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final

from starlette.background import BackgroundTask
from starlette.responses import StreamingResponse

from tether.frontend.events.feed import Batch
from tether.frontend.events.hub import EventHub, Subscription
from tether.frontend.schemas.events import EventGap
from tether.model import PrincipalRecord
from tether.model.event import EventKind, RegionEvent, RegionObject, RegionSnapshot

KIND_GROUPS: Final = tuple(sorted({kind.value.split(".")[0] for kind in EventKind}))
"""What `kind=` may name besides a kind: every kind of a group (`task`: task.started, ...)."""

_GROUP_OF_OBJECT: Final = {
    "job": "job",
    "admission": "job",
    "task": "task",
    "task-status": "task",
    "operation": "operation",
    "machine": "machine",
    "shard": "shard",
}

UNTIL_WAIT_S: Final = 2.0
"""How long a stream that ends (`follow=false`) waits for the feed to reach the store's
revision of the request."""

EVENT_STREAM: Final = "text/event-stream"

RETRY_MS: Final = 1000
"""How long an EventSource waits before it reconnects."""


KIND_SELECTORS: Final = (*KIND_GROUPS, *(kind.value for kind in EventKind))
"""Everything `kind=` may name."""


def check_kinds(kinds: Iterable[str]) -> tuple[str, ...]:
    """The kinds and groups asked for; ValueError naming one that is neither."""
    for kind in kinds:
        if kind not in KIND_SELECTORS:
            raise ValueError(
                f"unknown event kind {kind!r}: name a kind (such as task.started) or a group "
                f"({', '.join(KIND_GROUPS)})"
            )
    return tuple(kinds)


@dataclass(frozen=True)
class EventFilter:
    """What a follower asked for (None or empty: anything) and what its principal may see."""

    principal: PrincipalRecord
    entitlement: str | None = None
    job: str | None = None
    machine: str | None = None
    kinds: tuple[str, ...] = ()

    def selects(self, item: RegionEvent | RegionObject, group: str, kind: str = "") -> bool:
        if self.entitlement is not None and item.entitlement != self.entitlement:
            return False
        if self.job is not None and item.job != self.job:
            return False
        if self.machine is not None and item.machine != self.machine:
            return False
        return not self.kinds or any(wanted in (group, kind) for wanted in self.kinds)

    def sees(self, hub: EventHub, entitlement: str | None) -> bool:
        """Admins see every event; others those of entitlements they are members of."""
        if self.principal.is_admin:
            return True
        return entitlement is not None and self.principal.name in hub.members(entitlement)

    def events(self, hub: EventHub, events: list[RegionEvent]) -> list[RegionEvent]:
        return [
            event
            for event in events
            if self.selects(event, event.kind.value.split(".")[0], event.kind.value)
            and self.sees(hub, event.entitlement)
        ]

    def objects(self, hub: EventHub) -> list[RegionObject]:
        return [
            item
            for item in hub.objects()
            if self.selects(item, _GROUP_OF_OBJECT.get(item.what, item.what))
            and self.sees(hub, item.entitlement)
        ]


def message(data: str, *, event: str | None = None, event_id: int | None = None) -> bytes:
    """One Server-Sent Events message (`data` holds no newline: it is compact JSON)."""
    lines = [f"event: {event}"] if event else []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append(f"data: {data}")
    return ("\n".join(lines) + "\n\n").encode()


Recheck = Callable[[], Awaitable[PrincipalRecord | None]]
"""The follower's principal as it is now; None once its token is gone."""


async def stream(
    hub: EventHub,
    subscription: Subscription,
    wanted: EventFilter,
    *,
    until: int | None,
    keepalive_s: float,
    recheck: Recheck,
) -> AsyncIterator[bytes]:
    """The follower's messages: kept events after `subscription.after`, then each new one, until
    the follower leaves; with `until`, only up to that revision. Its principal is looked up
    again every `keepalive_s`: a deleted token ends the stream, a changed role or membership
    applies. Ends the subscription."""
    try:
        after = subscription.after
        # The position, as an id without data: a client resumes from it before any event.
        yield f"retry: {RETRY_MS}\nid: {after}\n\n".encode()
        if subscription.gap:
            # The state and its revision read together, with no await between.
            after = hub.revision
            snapshot = RegionSnapshot(revision=after, objects=wanted.objects(hub))
            yield _gap(subscription, hub) + message(
                snapshot.model_dump_json(), event="snapshot", event_id=after
            )
        for revision, events in subscription.backlog:
            if revision > after:
                yield _batch(hub, wanted, revision, events)
        if until is not None:
            # A revision whose writes are all outside the region's keys never reaches the feed.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(UNTIL_WAIT_S):
                    await hub.wait_for(until)
            while not subscription.queue.empty():
                queued = subscription.queue.get_nowait()
                if queued is None or queued[0] > until:
                    break
                if queued[0] > after:
                    yield _batch(hub, wanted, *queued)
            return
        position = max([after, *(revision for revision, _ in subscription.backlog)])
        checked = time.monotonic()
        while True:
            batch: Batch | None = None
            try:
                async with asyncio.timeout(keepalive_s):
                    batch = await subscription.queue.get()
            except TimeoutError:
                pass  # nothing to tell: a keepalive below
            else:
                if batch is None:
                    return
            if time.monotonic() - checked >= keepalive_s:
                principal = await recheck()
                if principal is None:
                    return
                wanted, checked = dataclasses.replace(wanted, principal=principal), time.monotonic()
            if batch is None:
                yield f"id: {position}\n: keepalive\n\n".encode()
            elif batch[0] > after:
                position = batch[0]
                yield _batch(hub, wanted, *batch)
    finally:
        hub.unsubscribe(subscription)


def response(
    hub: EventHub,
    subscription: Subscription,
    wanted: EventFilter,
    *,
    until: int | None,
    keepalive_s: float,
    recheck: Recheck,
) -> StreamingResponse:
    """The streaming response of `stream`, which no proxy should buffer. Its subscription ends
    with it, also when the client left before it began (the stream never ran)."""
    messages = stream(
        hub, subscription, wanted, until=until, keepalive_s=keepalive_s, recheck=recheck
    )
    # nginx buffers a response unless told not to.
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    ended = BackgroundTask(hub.unsubscribe, subscription)
    return StreamingResponse(messages, media_type=EVENT_STREAM, headers=headers, background=ended)


def _batch(hub: EventHub, wanted: EventFilter, revision: int, events: list[RegionEvent]) -> bytes:
    """A revision's events the follower wants; the last one carries the revision as its id, so
    that a follower cut off in the middle of a revision resumes from its start."""
    shown = wanted.events(hub, events)
    return b"".join(
        message(event.model_dump_json(), event_id=revision if last else None)
        for last, event in ((n == len(shown) - 1, event) for n, event in enumerate(shown))
    )


def _gap(subscription: Subscription, hub: EventHub) -> bytes:
    gap = EventGap(
        type="about:blank",
        status=410,
        title="Events no longer kept",
        detail=f"the events after revision {subscription.after} are no longer kept (this "
        f"frontend keeps those after revision {hub.floor}); the state at revision "
        f"{hub.revision} follows, then the events after it",
        last_event_id=subscription.after,
        kept_after=hub.floor,
    )
    return message(gap.model_dump_json(), event="gap")
