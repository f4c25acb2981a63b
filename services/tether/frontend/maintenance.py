"""Scheduling and cancelling maintenance: which machines, and the notice the region acts on."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Final

from tether.frontend import records
from tether.frontend.problems import InvalidInput, NotFound
from tether.frontend.schemas.maintenance import MaintenanceRequest
from tether.model import AdvanceNotice, FaultDomain, Machine, to_json
from tether.store import (
    Delete,
    Get,
    Put,
    RangeResult,
    Store,
    key_missing,
    keys,
    mod_revision_is,
)

PAST_START_SLACK: Final = timedelta(minutes=1)
"""How far in the past a start may be (clocks differ); earlier is a mistake, not a request."""
_READ_CHUNK: Final = 100
"""Machine records read per transaction (etcd allows 128 operations in one)."""


async def machines_of(store: Store, request: MaintenanceRequest) -> list[str]:
    """The ids of the machines the request names; 404 naming what is not there."""
    if request.machines is not None:
        wanted = list(dict.fromkeys(request.machines))
        missing = []
        for start in range(0, len(wanted), _READ_CHUNK):
            chunk = wanted[start : start + _READ_CHUNK]
            result = await store.txn([], [Get(keys.machine(machine_id)) for machine_id in chunk])
            for machine_id, found in zip(chunk, result.results, strict=True):
                if isinstance(found, RangeResult) and not found.kvs:
                    missing.append(machine_id)
        if missing:
            shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
            raise NotFound(f"{len(missing)} machine(s) do not exist: {shown}")
        return wanted
    level, path = (
        (FaultDomain.MSB, request.msb)
        if request.msb is not None
        else (FaultDomain.RACK, request.rack)
    )
    machines = await records.scan(store, keys.MACHINES, Machine)
    chosen = [machine.id for machine in machines if level.of(machine.topology) == path]
    if not chosen:
        raise NotFound(f"no machine is in {level.value} '{path}'")
    return chosen


async def schedule(store: Store, request: MaintenanceRequest, now: datetime) -> AdvanceNotice:
    """Stores the notice; the brokers drain the machines and the schedulers move their tasks."""
    start = request.start or now
    if start < now - PAST_START_SLACK:
        raise InvalidInput(f"start {start.isoformat()} is in the past; leave it out to start now")
    notice = AdvanceNotice(
        id=str(uuid.uuid4()),
        machines=await machines_of(store, request),
        start=start,
        duration_s=request.duration_s,
        kind=request.kind,
        reason=request.reason,
    )
    key = keys.maintenance(notice.id)
    await store.txn([key_missing(key)], [Put(key, to_json(notice))])
    return notice


async def cancel(store: Store, notice_id: str) -> AdvanceNotice:
    """Deletes the notice: its open moves are withdrawn and its machines go back up."""
    key = keys.maintenance(notice_id)
    found = await records.get(store, key, AdvanceNotice)
    if found is None:
        raise NotFound(f"maintenance '{notice_id}' does not exist")
    await store.txn([mod_revision_is(key, found.kv.mod_revision)], [Delete(key)])
    return found.model
