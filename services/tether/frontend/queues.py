"""Reading queues: each tree's status as its decider published it, and one entitlement's
waiting jobs in order, a page at a time from this frontend's `QueueIndex`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

from tether.frontend import records
from tether.frontend.queue_index import QueueIndex
from tether.model.admission import EntitlementUse, QueueStatus
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


async def queue(
    store: Store, index: QueueIndex, entitlement: str, offset: int, limit: int, now: datetime
) -> bytes:
    """`limit` of the entitlement's waiting jobs from `offset`, in order, and its use: a
    `QueueView` as JSON."""
    total, waiting = await index.page(entitlement, offset, limit)
    found = (await uses(store)).get(entitlement)
    now_s = now.timestamp()
    body = {
        "entitlement": entitlement,
        "use": None if found is None else found[0].model_dump(mode="json"),
        "reported_at": None if found is None else found[1].isoformat(),
        "total": total,
        "offset": offset,
        "jobs": [
            _view(place, record, now_s) for place, record in enumerate(waiting, start=offset + 1)
        ],
    }
    return orjson.dumps(body)


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
        "admitted": record.get("admitted") or 0,
        "requested": requested,
        "reason": record.get("reason", ""),
    }
