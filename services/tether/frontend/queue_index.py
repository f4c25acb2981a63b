"""Every entitlement's waiting jobs in order, kept from a watch of the admission records: a
queue request reads memory, not ten thousand records from the store."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from tether.aio import cancel_and_wait
from tether.frontend.listing import wait_listed
from tether.model.admission import AdmissionState
from tether.store import KeyValue, Store, keys
from tether.store.feed import PrefixFeed

log = logging.getLogger(__name__)

Order = tuple[bool, int, str, str, str]

_QUEUED: Final = AdmissionState.QUEUED.value
_ADMITTED: Final = AdmissionState.ADMITTED.value
_VIEWED: Final = (
    "job",
    "priority",
    "start_deadline",
    "queued_at",
    "tasks",
    "least_tasks",
    "admitted",
    "task_resources",
    "reason",
)
"""The fields of a record a queue's view shows."""
_LAST: Final = "~"
"""Sorts after every timestamp: jobs without a deadline go after those with one."""


class QueueIndex:
    """The waiting jobs of every entitlement, from one listing of `admissions/` and then its
    watch. Only the records of jobs waiting for tasks to be admitted are kept (queued, or
    admitted with fewer than their count), as the plain JSON the view needs (building models
    for ten thousand records took most of a second), and each entitlement's order is sorted
    once per change. It trails the store by the watch's delay."""

    def __init__(self, store: Store, wait_s: float) -> None:
        self._wait_s = wait_s
        self._waiting: defaultdict[str, dict[str, tuple[Order, dict[str, Any]]]] = defaultdict(dict)
        self._entitlement_of: dict[str, str] = {}
        """Key -> the entitlement whose queue holds it."""
        self._sorted: dict[str, list[dict[str, Any]]] = {}
        self._listing: set[str] = set()
        self._listed = asyncio.Event()
        self._feed = PrefixFeed(store, keys.ADMISSIONS, self)
        self._starting: asyncio.Task[None] | None = None
        self._started_at = 0.0

    async def start(self) -> None:
        """Starts listing in the background (again and again while the store is away)."""
        self._started_at = time.monotonic()
        self._starting = asyncio.create_task(self._feed.start(retry=True), name="queue index")

    async def stop(self) -> None:
        await cancel_and_wait(self._starting)
        await self._feed.stop()

    async def page(self, entitlement: str, offset: int, limit: int) -> tuple[int, list[Any]]:
        """How many jobs wait in the entitlement's queue, and the records of `limit` of them
        from `offset` (0: the head), in order; 503 if the listing takes over `wait_s`."""
        what = "the admission records to order the queues"
        await wait_listed(self._listed, self._wait_s, self._started_at, what)
        ordered = self._sorted.get(entitlement)
        if ordered is None:
            entries = sorted(self._waiting.get(entitlement, {}).values(), key=lambda e: e[0])
            ordered = self._sorted[entitlement] = [record for _, record in entries]
        return len(ordered), ordered[offset : offset + limit]

    # --- the feed's sink -------------------------------------------------------------------

    def begin_listing(self) -> None:
        self._listing = set()

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        for kv in kvs:
            self._listing.add(kv.key)
            self.put(kv)

    def put(self, kv: KeyValue) -> None:
        self.delete(kv.key, kv.mod_revision)
        try:
            record = orjson.loads(kv.value)
            if not _waits(record):
                return
            entry = (_order(record), {name: record.get(name) for name in _VIEWED})
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as error:
            log.warning("admission record %s is not valid (%s); not listed", kv.key, error)
            return
        entitlement = kv.key[len(keys.ADMISSIONS) :].split("/", 1)[0]
        self._waiting[entitlement][kv.key] = entry
        self._entitlement_of[kv.key] = entitlement
        self._sorted.pop(entitlement, None)

    def delete(self, key: str, revision: int) -> None:
        entitlement = self._entitlement_of.pop(key, None)
        if entitlement is None:
            return
        waiting = self._waiting[entitlement]
        waiting.pop(key, None)
        if not waiting:
            del self._waiting[entitlement]
        self._sorted.pop(entitlement, None)

    def end_listing(self, revision: int) -> None:
        for key in [key for key in self._entitlement_of if key not in self._listing]:
            self.delete(key, revision)
        self._listing = set()
        self._listed.set()


def _utc_key(text: str) -> str:
    """A stored timestamp as a string that sorts as the time does: pydantic writes UTC as
    `...SS.ffffffZ`, or `...SSZ` when the microseconds are 0; anything else is converted."""
    if text.endswith("Z"):
        return text if len(text) == 27 else f"{text[:-1]}.000000Z"
    return datetime.fromisoformat(text).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _waits(record: dict[str, Any]) -> bool:
    """`Admission.waits` on the plain record."""
    state = record.get("state", _QUEUED)
    if state == _QUEUED:
        return True
    admitted: int = record.get("admitted", 0)
    tasks: int = record["tasks"]
    return state == _ADMITTED and admitted < tasks


def _order(record: dict[str, Any]) -> Order:
    """`Admission.queue_key` on the plain record."""
    deadline = record.get("start_deadline")
    growing = record.get("state") == _ADMITTED and record["least_tasks"] < record["tasks"]
    return (
        growing,
        -record["priority"],
        _LAST if deadline is None else _utc_key(deadline),
        _utc_key(record["queued_at"]),
        record["job"],
    )
