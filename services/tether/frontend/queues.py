"""Reading queues: each tree's status as its decider published it, and one entitlement's
waiting jobs in order, read fast enough for ten thousand of them."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import orjson

from tether.frontend import records
from tether.frontend.schemas.queues import QueuedJobView, QueueView
from tether.model import Resources
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


async def queue(store: Store, entitlement: str, now: datetime) -> QueueView:
    """The entitlement's waiting jobs in order, and its use."""
    result = await store.range(keys.admissions_of(entitlement))
    # Admission records are read as plain JSON: validating ten thousand models would take
    # most of a second, and the decider wrote them from validated models.
    waiting = [
        record
        for record in (orjson.loads(kv.value) for kv in result.kvs)
        if record.get("state", AdmissionState.QUEUED.value) == AdmissionState.QUEUED.value
    ]
    waiting.sort(key=_order)
    jobs = [_view(place, record, now) for place, record in enumerate(waiting, start=1)]
    found = (await uses(store)).get(entitlement)
    return QueueView.model_construct(
        entitlement=entitlement,
        use=None if found is None else found[0],
        reported_at=None if found is None else found[1],
        jobs=jobs,
    )


def _order(record: dict[str, Any]) -> tuple[int, float, float, str]:
    """`Admission.order` on the plain record."""
    deadline = record.get("start_deadline")
    return (
        -int(record["priority"]),
        math.inf if deadline is None else datetime.fromisoformat(deadline).timestamp(),
        datetime.fromisoformat(record["queued_at"]).timestamp(),
        record["job"],
    )


def _view(place: int, record: dict[str, Any], now: datetime) -> QueuedJobView:
    queued_at = datetime.fromisoformat(record["queued_at"])
    deadline = record.get("start_deadline")
    tasks = int(record["tasks"])
    each: dict[str, Any] = record["task_resources"]
    requested = Resources.model_construct(
        cpu=each.get("cpu", 0) * tasks,
        memory_mib=each.get("memory_mib", 0) * tasks,
        disk_gib=each.get("disk_gib", 0) * tasks,
        gpus=each.get("gpus", 0) * tasks,
        extra={name: amount * tasks for name, amount in each.get("extra", {}).items()},
    )
    return QueuedJobView.model_construct(
        position=place,
        job=record["job"],
        priority=record["priority"],
        start_deadline=None if deadline is None else datetime.fromisoformat(deadline),
        queued_at=queued_at,
        waiting_s=max((now - queued_at).total_seconds(), 0.0),
        tasks=tasks,
        least_tasks=int(record["least_tasks"]),
        requested=requested,
        reason=record.get("reason", ""),
    )
