"""Scheduling and cancelling maintenance, and draining machines: the notices the region acts on."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Final

from tether.frontend import records
from tether.frontend.auth import require_admin
from tether.frontend.problems import Conflict, NotFound, validation_problem
from tether.frontend.schemas.maintenance import (
    MachineDrainRequest,
    MaintenanceRequest,
    MaintenanceView,
)
from tether.model import (
    DRAIN_KINDS,
    MAX_MAINTENANCE_S,
    AdvanceNotice,
    FaultDomain,
    Machine,
    MaintenanceKind,
    PrincipalRecord,
    drain_id,
    to_json,
)
from tether.store import (
    Delete,
    Get,
    Put,
    Store,
    key_exists,
    key_missing,
    keys,
    mod_revision_is,
)

PAST_START_SLACK: Final = timedelta(minutes=1)
"""How far in the past a start may be (clocks differ); earlier is a mistake, not a request."""
_READ_CHUNK: Final = 100
"""Machine records read per transaction (etcd allows 128 operations in one)."""
_DRAINS: Final = (MaintenanceKind.DECOMMISSION, MaintenanceKind.DRAIN)
"""The kinds of a machine's own notices (`drain_id`), the strongest first."""
_HELD_BY: Final = {
    MaintenanceKind.DRAIN: _DRAINS,
    MaintenanceKind.DECOMMISSION: (MaintenanceKind.DECOMMISSION,),
}
"""The notices that already do what a drain or decommission asks for."""
_UNDRAIN_ATTEMPTS: Final = 5


async def maintenance_views(store: Store, now: datetime) -> list[MaintenanceView]:
    """Every maintenance scheduled or under way (or over, until its notice is deleted),
    soonest first, with its phase at `now`."""
    notices = await records.scan(store, keys.MAINTENANCE, AdvanceNotice)
    ordered = sorted(notices, key=lambda notice: (notice.start, notice.id))
    return [MaintenanceView.of(notice, now) for notice in ordered]


async def machines_of(store: Store, request: MaintenanceRequest) -> list[Machine]:
    """The machines the request names; 404 naming what is not there."""
    if request.machines is not None:
        wanted = list(dict.fromkeys(request.machines))
        missing = []
        found: list[Machine] = []
        for start in range(0, len(wanted), _READ_CHUNK):
            chunk = wanted[start : start + _READ_CHUNK]
            result = await store.txn([], [Get(keys.machine(machine_id)) for machine_id in chunk])
            for position, machine_id in enumerate(chunk):
                kv = result.kv(position)
                if kv is None:
                    missing.append(machine_id)
                else:
                    found.append(records.load(Machine, kv))
        if missing:
            shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
            raise NotFound(f"{len(missing)} machine(s) do not exist: {shown}")
        return found
    level, path = (
        (FaultDomain.MSB, request.msb)
        if request.msb is not None
        else (FaultDomain.RACK, request.rack)
    )
    machines = await records.scan(store, keys.MACHINES, Machine)
    chosen = [machine for machine in machines if level.of(machine.topology) == path]
    if not chosen:
        raise NotFound(f"no machine is in {level.value} '{path}'")
    return chosen


async def require_brokers(store: Store, machines: Iterable[Machine]) -> None:
    """409 unless a broker runs for every datacenter of `machines`: a broker carries out the
    maintenance of its datacenter's machines, and without one the notice would wait forever."""
    for dc in sorted({machine.topology.dc for machine in machines}):
        if not await store.count(keys.brokers_of(dc)):
            raise Conflict(
                f"no broker runs for datacenter '{dc}', so nobody would carry out maintenance "
                f"of its machines; start one (tether broker --dc {dc}) and try again"
            )


async def schedule(store: Store, request: MaintenanceRequest, now: datetime) -> AdvanceNotice:
    """Stores the notice; the brokers drain the machines and the schedulers move their tasks."""
    start = request.start or now
    if start < now - PAST_START_SLACK:
        message = f"is in the past ({start.isoformat()}); leave it out to start now"
        raise validation_problem([{"loc": ("start",), "msg": message}])
    machines = await machines_of(store, request)
    await require_brokers(store, machines)
    notice = AdvanceNotice(
        id=str(uuid.uuid4()),
        machines=[machine.id for machine in machines],
        start=start,
        duration_s=request.duration_s,
        kind=request.kind,
        reason=request.reason,
    )
    key = keys.maintenance(notice.id)
    await store.txn([key_missing(key)], [Put(key, to_json(notice))])
    return notice


async def cancel(store: Store, notice_id: str, principal: PrincipalRecord) -> AdvanceNotice:
    """Deletes the notice: its open moves are withdrawn and its machines go back up. Only an
    admin undoes a drain or decommission, as only an admin asks for one."""
    key = keys.maintenance(notice_id)
    found = await records.get(store, key, AdvanceNotice)
    if found is None:
        raise NotFound(f"maintenance '{notice_id}' does not exist")
    if found.model.kind in DRAIN_KINDS:
        require_admin(principal)
    await store.txn([mod_revision_is(key, found.kv.mod_revision)], [Delete(key)])
    return found.model


async def drain(
    store: Store,
    machine_id: str,
    kind: MaintenanceKind,
    request: MachineDrainRequest,
    now: datetime,
) -> tuple[AdvanceNotice, bool]:
    """Stores the machine's drain or decommission notice (`drain_id`), starting at the
    deadline and lasting the longest window there is: from now on the machine takes no new
    tasks, and its tasks are moved off it by the deadline. A notice that already does this
    (a decommission also drains) is returned instead, with False: nothing changes then."""
    notice = AdvanceNotice(
        id=drain_id(kind, machine_id),
        machines=[machine_id],
        start=now + timedelta(seconds=request.deadline_s),
        duration_s=MAX_MAINTENANCE_S,
        kind=kind,
        reason=request.reason,
    )
    machine_key = keys.machine(machine_id)
    machine = await records.get(store, machine_key, Machine)
    if machine is None:
        raise NotFound(f"machine '{machine_id}' does not exist")
    await require_brokers(store, [machine.model])
    holders = [keys.maintenance(drain_id(holder, machine_id)) for holder in _HELD_BY[kind]]
    result = await store.txn(
        [key_exists(machine_key), *(key_missing(key) for key in holders)],
        [Put(keys.maintenance(notice.id), to_json(notice))],
        [Get(machine_key), *(Get(key) for key in holders)],
    )
    if result.succeeded:
        return notice, True
    if result.kv(0) is None:
        raise NotFound(f"machine '{machine_id}' does not exist")
    # One compare failed and the machine is there: one of the holders is (read at the same
    # revision as the compares).
    held = next(kv for kv in map(result.kv, range(1, len(holders) + 1)) if kv is not None)
    return records.load(AdvanceNotice, held), False


async def undrain(store: Store, machine_id: str) -> list[AdvanceNotice]:
    """Deletes the machine's drain and decommission notices, if any: their open moves are
    withdrawn and the machine goes back up (unless planned maintenance holds it)."""
    machine_key = keys.machine(machine_id)
    held = [keys.maintenance(drain_id(kind, machine_id)) for kind in _DRAINS]
    for _ in range(_UNDRAIN_ATTEMPTS):
        result = await store.txn([], [Get(machine_key), *(Get(key) for key in held)])
        if result.kv(0) is None:
            raise NotFound(f"machine '{machine_id}' does not exist")
        found = [kv for kv in map(result.kv, range(1, len(held) + 1)) if kv is not None]
        if not found:
            return []
        notices = [records.load(AdvanceNotice, kv) for kv in found]
        deleted = await store.txn(
            [mod_revision_is(kv.key, kv.mod_revision) for kv in found],
            [Delete(kv.key) for kv in found],
        )
        if deleted.succeeded:
            return notices
    raise Conflict(f"the drain of machine '{machine_id}' kept changing; try again")
