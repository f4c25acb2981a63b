"""The resource broker process: keeps `machines/` and `allocations/` in step with heartbeats,
and machines' states in step with scheduled maintenance."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

import pydantic

from tether import metrics
from tether.aio import cancel_and_wait
from tether.broker.harvest import capacity_change
from tether.broker.harvest_notices import HarvestNotices
from tether.broker.inventory import HeartbeatMismatch, announced_machine, record_for
from tether.broker.maintenance import (
    MAINTAINED_STATES,
    awaits_empty,
    is_over,
    maintenance_state,
    next_change,
)
from tether.broker.settings import BrokerSettings
from tether.model import (
    ZERO,
    AdvanceNotice,
    AgentHeartbeat,
    Allocation,
    BrokerRegistration,
    Machine,
    MaintenanceKind,
    Resources,
    from_json,
    to_json,
)
from tether.service import Service
from tether.store import (
    Delete,
    Get,
    KeyValue,
    Op,
    Put,
    Store,
    StoreError,
    keys,
    mod_revision_is,
)
from tether.store.mirror import PrefixMirror
from tether.store.registration import Registration

_log = logging.getLogger(__name__)

MAX_ATTEMPTS: Final = 10
"""Compare-and-swap attempts per machine before waiting for its next heartbeat change."""
_MAINTAINED_MARKERS: Final = tuple(f'"{state.value}"'.encode() for state in MAINTAINED_STATES)
"""The JSON strings of the maintained states: a record without one needs no parsing."""
RETRY_S: Final = 0.5
"""Pause after the store failed a request, before trying the same machines again."""
EMPTY_CHECK_S: Final = 1.0
"""How often a machine whose decommission is due is looked at for tasks left on it (the broker
does not follow allocations, which change far more often than anything else it reads)."""


class Broker(Service):
    """Creates a machine record (and its empty allocation) for every new machine of its
    datacenter that heartbeats, and updates a known machine's inventory fields when the agent
    announces new ones. It drains the datacenter's machines with maintenance scheduled, puts
    them in maintenance for the window and back up after it, then deletes the notice; a
    machine being decommissioned becomes decommissioned once its tasks are gone. It never
    deletes machines; it owns `store` and closes it on `stop()`.
    """

    def __init__(self, store: Store, settings: BrokerSettings) -> None:
        self.name = f"broker {settings.dc}"
        self._store = store
        self.settings = settings
        self._heartbeats = PrefixMirror(store, keys.HEARTBEATS, self._heartbeats_changed)
        self._machines = PrefixMirror(store, keys.MACHINES, self._machines_changed)
        self._notices = PrefixMirror(store, keys.MAINTENANCE, self._notices_changed)
        self._harvest = HarvestNotices(store, self._notices, settings.harvest_notice_s)
        # Machines some notice names: a change to one of them (it appeared, or came back up
        # from down in the middle of its window) is decided on again.
        self._noticed: set[str] = set()
        self._maintenance_due = True
        self._maintenance_timer: asyncio.TimerHandle | None = None
        self._evicted: set[tuple[str, datetime]] = set()
        """Eviction notices (id, start) whose tasks left behind were counted."""
        self._pending: set[str] = set()
        self._queued_revision = 0
        """The heartbeats mirror's revision when machines were last queued in `_pending`."""
        self.heartbeats_handled = 0
        """The heartbeats mirror's revision up to which every change has been acted on (or
        skipped): a test that nothing was recorded for a heartbeat waits for it."""
        self.maintained_revision = 0
        """The machines mirror's revision that the last completed maintenance pass decided
        from: a test that a machine was left as it was waits for a pass that saw it."""
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        # The frontend refuses maintenance of a datacenter without one: nobody would do it.
        self._registration = Registration(
            store,
            keys.broker(settings.dc, uuid.uuid4().hex[:12]),
            lambda: to_json(
                BrokerRegistration(dc=settings.dc, pid=os.getpid(), since=datetime.now(UTC))
            ),
            settings.lease_ttl_s,
            self.name,
        )

    async def start(self) -> None:
        await self._machines.start()
        await self._notices.start()
        await self._heartbeats.start()
        self._pending.update(keys.last_segment(key) for key in self._heartbeats.items)
        self._queued_revision = self._heartbeats.revision
        self._wake.set()
        self._worker = asyncio.create_task(self._work(), name=self.name)
        await self._registration.start()

    async def stop(self) -> None:
        await self._registration.stop()
        await cancel_and_wait(self._worker)
        self._worker = None
        if self._maintenance_timer is not None:
            self._maintenance_timer.cancel()
        await self._heartbeats.stop()
        await self._notices.stop()
        await self._machines.stop()
        await self._store.close()

    async def _heartbeats_changed(self, changed: set[str]) -> None:
        # Only queued here: the mirror's watch must not wait for (or fail with) our writes.
        self._pending.update(keys.last_segment(key) for key in changed)
        self._queued_revision = self._heartbeats.revision
        self._wake.set()

    async def _notices_changed(self, changed: set[str]) -> None:
        self._maintenance_due = True
        self._wake.set()

    async def _machines_changed(self, changed: set[str]) -> None:
        if any(keys.last_segment(key) in self._noticed for key in changed):
            self._maintenance_due = True
            self._wake.set()

    def _maintenance_changes_at(self, moment: datetime) -> None:
        if self._maintenance_timer is not None:
            self._maintenance_timer.cancel()
        delay_s = (moment - datetime.now(UTC)).total_seconds()
        self._maintenance_timer = asyncio.get_running_loop().call_later(
            max(delay_s, 0.0), self._notices_changed_now
        )

    def _notices_changed_now(self) -> None:
        self._maintenance_timer = None
        self._maintenance_due = True
        self._wake.set()

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._maintenance_due:
                self._maintenance_due = False
                try:
                    await self._apply_maintenance()
                except StoreError as error:
                    self._maintenance_due = True
                    _log.warning("store request failed, retrying in %ss: %s", RETRY_S, error)
                    await asyncio.sleep(RETRY_S)
                    self._wake.set()
            while self._pending:
                machine_id = self._pending.pop()
                try:
                    await self._sync(machine_id)
                except StoreError as error:
                    self._pending.add(machine_id)
                    _log.warning("store request failed, retrying in %ss: %s", RETRY_S, error)
                    await asyncio.sleep(RETRY_S)
            self.heartbeats_handled = self._queued_revision

    def _scheduled(self) -> list[tuple[AdvanceNotice, int]]:
        """Every readable advance notice, with its mod revision."""
        notices = []
        for key, kv in list(self._notices.items.items()):
            try:
                notices.append((from_json(AdvanceNotice, kv.value, stored=True), kv.mod_revision))
            except pydantic.ValidationError as error:
                _log.error("ignoring malformed maintenance notice %s: %s", key, error)
        return notices

    def _machines_of_dc(self, machine_ids: set[str]) -> dict[str, tuple[Machine, int]]:
        """This datacenter's machines among `machine_ids`, plus every one of them that is
        draining or in maintenance (a cancelled notice leaves those behind)."""
        found: dict[str, tuple[Machine, int]] = {}
        for key, kv in list(self._machines.items.items()):
            machine_id = keys.last_segment(key)
            # Most machines are up: only parse those the notices name or that may be held.
            if machine_id not in machine_ids and not any(
                marker in kv.value for marker in _MAINTAINED_MARKERS
            ):
                continue
            try:
                machine = from_json(Machine, kv.value, stored=True)
            except pydantic.ValidationError:
                continue  # _sync reports malformed records
            if machine.topology.dc == self.settings.dc and (
                machine_id in machine_ids or machine.state in MAINTAINED_STATES
            ):
                found[machine_id] = (machine, kv.mod_revision)
        return found

    async def _apply_maintenance(self) -> None:
        """Sets each machine of the datacenter to the state its maintenance calls for, and
        deletes the notices that are over."""
        now = datetime.now(UTC)
        seen = self._machines.revision
        scheduled = self._scheduled()
        by_machine: dict[str, list[AdvanceNotice]] = {}
        for notice, _ in scheduled:
            for machine_id in notice.machines:
                by_machine.setdefault(machine_id, []).append(notice)
        self._noticed = set(by_machine)
        emptying = False
        mine = self._machines_of_dc(set(by_machine))
        await self._count_lost(scheduled, mine, now)
        for machine_id, (machine, revision) in mine.items():
            notices = by_machine.get(machine_id, [])
            key = keys.machine(machine_id)
            compares = [mod_revision_is(key, revision)]
            empty = False
            if awaits_empty(machine.state, notices, now):
                allocation_revision, empty = await self._allocation_of(machine_id)
                # The allocation record's revision versions its entries: none is added meanwhile.
                compares.append(mod_revision_is(keys.allocation(machine_id), allocation_revision))
                emptying = emptying or not empty
            state = maintenance_state(machine.state, notices, now, empty=empty)
            if state is None:
                continue
            changed = machine.model_copy(update={"state": state})
            result = await self._store.txn(compares, [Put(key, to_json(changed))])
            if result.succeeded:
                metrics.BROKER_STATE_CHANGES.labels(state.value).inc()
                _log.info("machine %s: %s for maintenance", machine_id, state.value)
            else:
                # Changed meanwhile (a heartbeat, the health checker): decide again on it.
                self._maintenance_due = True
                self._wake.set()
        for notice, revision in scheduled:
            if is_over(notice, now):
                key = keys.maintenance(notice.id)
                await self._store.txn([mod_revision_is(key, revision)], [Delete(key)])
        upcoming = next_change((notice for notice, _ in scheduled), now)
        if emptying:
            check = now + timedelta(seconds=EMPTY_CHECK_S)
            upcoming = check if upcoming is None else min(upcoming, check)
        if upcoming is not None:
            self._maintenance_changes_at(upcoming)
        self.maintained_revision = seen

    async def _count_lost(
        self, scheduled: list[tuple[AdvanceNotice, int]], mine: Mapping[str, object], now: datetime
    ) -> None:
        """Counts the tasks still on this datacenter's machines when their eviction is due: the
        host takes them down with the machine (once per notice)."""
        for notice, _ in scheduled:
            due = (notice.id, notice.start)
            if (
                notice.kind is not MaintenanceKind.EVICTION
                or now < notice.start
                or due in self._evicted
            ):
                continue
            self._evicted.add(due)
            for machine_id in set(notice.machines) & set(mine):
                entries = await self._store.range(keys.allocation_entries(machine_id))
                if entries.kvs:
                    metrics.BROKER_HARVEST_LOST.inc(len(entries.kvs))
                    _log.warning(
                        "machine %s: evicted with %d task(s) still on it",
                        machine_id,
                        len(entries.kvs),
                    )

    async def _allocation_of(self, machine_id: str) -> tuple[int, bool]:
        """The mod revision of the machine's allocation record, and whether no task is
        allocated on it, from one read."""
        result = await self._store.txn(
            [],
            [
                Get(keys.allocation(machine_id)),
                Get(keys.allocation_entries(machine_id), prefix=True),
            ],
        )
        record, entries = result.kv(0), result.kvs(1)
        return (record.mod_revision if record else 0), not entries

    def _announced(self, machine_id: str) -> Machine | None:
        """The machine the current heartbeat of `machine_id` announces for this datacenter."""
        kv = self._heartbeats.items.get(keys.heartbeat(machine_id))
        if kv is None:
            return None
        try:
            return announced_machine(
                machine_id, from_json(AgentHeartbeat, kv.value, stored=True), self.settings.dc
            )
        except (pydantic.ValidationError, HeartbeatMismatch) as error:
            _log.error("ignoring malformed heartbeat of machine %s: %s", machine_id, error)
            return None

    async def _sync(self, machine_id: str) -> None:
        announced = self._announced(machine_id)
        if announced is None:
            return
        if await self._record(machine_id, announced):
            await self._harvest.apply(announced)

    async def _record(self, machine_id: str, announced: Machine) -> bool:
        """Writes the machine record the announcement calls for; whether the record now says
        what was announced."""
        machine_key, allocation_key = keys.machine(machine_id), keys.allocation(machine_id)
        recorded_kv = self._machines.items.get(machine_key)
        # Allocations are not mirrored: assume none until a failed compare says otherwise.
        allocation_revision = 0
        for _ in range(MAX_ATTEMPTS):
            if recorded_kv is None:
                recorded = None
            else:
                try:
                    recorded = from_json(Machine, recorded_kv.value, stored=True)
                except pydantic.ValidationError as error:
                    # Never overwrite a record we cannot read: an operator has to look at it.
                    _log.error("leaving malformed machine record %s alone: %s", machine_id, error)
                    return False
            record = record_for(announced, recorded)
            if record is None:
                return True
            compares = [
                mod_revision_is(machine_key, recorded_kv.mod_revision if recorded_kv else 0)
            ]
            success: list[Op] = [Put(machine_key, to_json(record))]
            if recorded_kv is None:
                compares.append(mod_revision_is(allocation_key, allocation_revision))
                if allocation_revision == 0:
                    success.append(Put(allocation_key, to_json(Allocation(machine=machine_id))))
            else:
                success.append(Get(keys.allocation_entries(machine_id), prefix=True))
            result = await self._store.txn(
                compares, success, [Get(machine_key), Get(allocation_key)]
            )
            if result.succeeded:
                metrics.BROKER_MACHINES_RECORDED.labels(
                    "new" if recorded is None else "inventory"
                ).inc()
                if recorded is None:
                    _log.info("machine %s: new in %s, recorded as up", machine_id, self.settings.dc)
                else:
                    _log.info("machine %s: inventory updated", machine_id)
                    self._warn_if_overcommitted(record, result.kvs(1))
                change = capacity_change(recorded, record)
                if change is not None:
                    metrics.BROKER_HARVEST_CHANGES.labels(change).inc()
                return True
            # Someone else wrote meanwhile: decide again on what is there now.
            recorded_kv, allocation_kv = result.kv(0), result.kv(1)
            allocation_revision = allocation_kv.mod_revision if allocation_kv else 0
        _log.error(
            "machine %s: gave up after %d conflicting writes; retrying on its next heartbeat",
            machine_id,
            MAX_ATTEMPTS,
        )
        return False

    def _warn_if_overcommitted(self, record: Machine, entries: Sequence[KeyValue]) -> None:
        """Warns when the machine's allocation `entries` hold more than its capacity (a harvest
        machine's shrink is no surprise: its notice moves the tasks)."""
        # The update stands regardless: the allocator sees no free space and places nothing more.
        if record.harvest is not None:
            return
        used = ZERO
        for kv in entries:
            try:
                used = used + from_json(Resources, kv.value, stored=True)
            except pydantic.ValidationError as error:
                _log.error(
                    "machine %s: malformed allocation entry %s: %s", record.id, kv.key, error
                )
                return
        shortfall = used.shortfall(record.capacity)
        if shortfall:
            _log.warning(
                "machine %s: capacity shrank below what is allocated (%s)",
                record.id,
                "; ".join(shortfall),
            )
