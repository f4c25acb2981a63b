"""Reading queues: each tree's status as its decider published it, and one entitlement's
waiting jobs in order, read fast enough for ten thousand of them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import orjson

from tether.frontend import records
from tether.model.admission import AdmissionState, EntitlementUse, QueueStatus
from tether.store import Store, keys


async def statuses(store: Store) -> list[QueueStatus]:
    """Every tree's last published status."""
    return await records.scan(store, keys.QUEUE_STATUS, QueueStatus)


async def uses(store: Store) -> dict[str, tuple[EntitlementUse, datetime]]:
    """Each entitlement's use, with when its decider reported it."""
    return {
        use.name: (use, status.updated_at)
        for status in await statuses(store)
        for use in status.entitlements
    }


async def queue(store: Store, entitlement: str, now: datetime) -> bytes:
    """The entitlement's waiting jobs in order, and its use: a `QueueView` as JSON."""
    result = await store.range(keys.admissions_of(entitlement))
    # Ten thousand admission records are read and answered as plain JSON: building models
    # for them took most of a second. The decider wrote them from validated models.
    waiting = [
        record
        for record in map(orjson.loads, (kv.value for kv in result.kvs))
        if record.get("state", _QUEUED) == _QUEUED
    ]
    waiting.sort(key=_order)
    found = (await uses(store)).get(entitlement)
    now_s = now.timestamp()
    body = {
        "entitlement": entitlement,
        "use": None if found is None else found[0].model_dump(mode="json"),
        "reported_at": None if found is None else found[1].isoformat(),
        "jobs": [_view(place, record, now_s) for place, record in enumerate(waiting, start=1)],
    }
    return orjson.dumps(body)


_QUEUED: Final = AdmissionState.QUEUED.value
_LAST: Final = "~"
"""Sorts after every timestamp: jobs without a deadline go after those with one."""


def _utc_key(text: str) -> str:
    """A stored timestamp as a string that sorts as the time does: pydantic writes UTC as
    `...SS.ffffffZ`, or `...SSZ` when the microseconds are 0; anything else is converted."""
    if text.endswith("Z"):
        return text if len(text) == 27 else f"{text[:-1]}.000000Z"
    return datetime.fromisoformat(text).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _order(record: dict[str, Any]) -> tuple[int, str, str, str]:
    """`Admission.order` on the plain record."""
    deadline = record.get("start_deadline")
    return (
        -record["priority"],
        _LAST if deadline is None else _utc_key(deadline),
        _utc_key(record["queued_at"]),
        record["job"],
    )


def _view(place: int, record: dict[str, Any], now_s: float) -> dict[str, Any]:
    """A `QueuedJobView` as plain JSON."""
    tasks: int = record["tasks"]
    each: dict[str, Any] = record["task_resources"]
    requested = {
        "cpu": each.get("cpu", 0) * tasks,
        "memory_mib": each.get("memory_mib", 0) * tasks,
        "disk_gib": each.get("disk_gib", 0) * tasks,
        "gpus": each.get("gpus", 0) * tasks,
        "extra": {name: amount * tasks for name, amount in each.get("extra", {}).items()},
    }
    queued_at = record["queued_at"]
    return {
        "position": place,
        "job": record["job"],
        "priority": record["priority"],
        "start_deadline": record.get("start_deadline"),
        "queued_at": queued_at,
        "waiting_s": max(now_s - datetime.fromisoformat(queued_at).timestamp(), 0.0),
        "tasks": tasks,
        "least_tasks": record["least_tasks"],
        "requested": requested,
        "reason": record.get("reason", ""),
    }
