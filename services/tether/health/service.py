"""The health checker process: flips machines between up and down as heartbeats go and come."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import pydantic

from tether import metrics
from tether.aio import Periodic
from tether.health.checker import Absences, next_state
from tether.health.settings import HealthSettings
from tether.model import Machine, MachineState, from_json, to_json
from tether.service import Service
from tether.store import (
    KeyValue,
    Put,
    Store,
    StoreError,
    key_exists,
    key_missing,
    keys,
    mod_revision_is,
)
from tether.store.mirror import PrefixMirror

_log = logging.getLogger(__name__)


class HealthChecker(Service):
    """Sets an `up` machine `down` once its heartbeat has been missing for the grace period, and
    a `down` machine `up` when its heartbeat is back.

    Every write compares the machine's mod revision and the heartbeat key's presence, so a
    second checker, the broker, or a heartbeat coming back at the last moment can never be
    overwritten. It owns `store` and closes it on `stop()`.
    """

    name = "health"

    def __init__(self, store: Store, settings: HealthSettings) -> None:
        self._store = store
        self.settings = settings
        self._heartbeats = PrefixMirror(store, keys.HEARTBEATS, self._heartbeats_changed)
        self._machines = PrefixMirror(store, keys.MACHINES, self._machines_changed)
        self._records: dict[str, tuple[KeyValue, Machine]] = {}
        """The machines mirror's valid records, parsed, by machine id."""
        self._dirty: set[str] = set()
        """Machines to decide on at the next check, besides those without a heartbeat."""
        self._checking = Periodic(self.name, settings.check_interval_s, self._check)

    async def start(self) -> None:
        # Absences count from here: machines silent since before the start get the whole grace.
        self._absences = Absences(time.monotonic())
        await self._heartbeats.start()
        await self._machines.start()
        for kv in self._machines.items.values():
            self._load(kv.key)
        heartbeats = {keys.last_segment(key) for key in self._heartbeats.items}
        self._absences.machines_present(self._records, heartbeats)
        self._dirty.update(self._records)
        self._checking.start()

    async def stop(self) -> None:
        await self._checking.stop()
        await self._machines.stop()
        await self._heartbeats.stop()
        await self._store.close()

    def _has_heartbeat(self, machine_id: str) -> bool:
        return keys.heartbeat(machine_id) in self._heartbeats.items

    def _load(self, machine_key: str) -> None:
        """Takes the machine's record from the mirror (or forgets the machine)."""
        machine_id = keys.last_segment(machine_key)
        kv = self._machines.items.get(machine_key)
        if kv is not None:
            try:
                self._records[machine_id] = (kv, from_json(Machine, kv.value, stored=True))
                self._dirty.add(machine_id)
                return
            except pydantic.ValidationError as error:
                _log.error("ignoring malformed machine record %s: %s", machine_id, error)
        self._records.pop(machine_id, None)
        self._absences.forget(machine_id)

    async def _machines_changed(self, changed: set[str]) -> None:
        now = time.monotonic()
        for key in changed:
            self._load(key)
            machine_id = keys.last_segment(key)
            if machine_id in self._records and not self._has_heartbeat(machine_id):
                self._absences.machine_seen(machine_id, now)

    async def _heartbeats_changed(self, changed: set[str]) -> None:
        now = time.monotonic()
        for key in changed:
            machine_id = keys.last_segment(key)
            if machine_id not in self._records:
                continue
            if key not in self._heartbeats.items:
                self._absences.heartbeat_gone(machine_id, now)
            self._dirty.add(machine_id)

    async def _check(self) -> None:
        now = time.monotonic()
        candidates = list(self._dirty.union(self._absences.missing()))
        self._dirty.clear()
        for position, machine_id in enumerate(candidates):
            try:
                await self._check_machine(machine_id, now)
            except StoreError as error:
                _log.warning("store request failed; checking again shortly: %s", error)
                self._dirty.update(candidates[position:])
                return

    async def _check_machine(self, machine_id: str, now: float) -> None:
        record = self._records.get(machine_id)
        if record is None:
            return
        heartbeat = self._has_heartbeat(machine_id)
        missing_for = self._absences.missing_for(machine_id, now)
        target = next_state(record[1].state, heartbeat, missing_for or 0.0, self.settings.grace_s)
        if target is None:
            if heartbeat:
                self._absences.forget(machine_id)
            return
        if not await self._set_state(machine_id, *record, target):
            # Changed meanwhile: the mirrors bring the change, and with it another decision.
            return
        metrics.HEALTH_MACHINES_MARKED.labels(target.value).inc()
        if target is MachineState.DOWN:
            _log.warning(
                "machine %s is down: no heartbeat for %.1fs (grace %ss)",
                machine_id,
                missing_for,
                self.settings.grace_s,
            )
            return
        self._absences.forget(machine_id)
        _log.info(
            "machine %s is up: its heartbeat is back%s",
            machine_id,
            "" if missing_for is None else f" after {missing_for:.1f}s",
        )

    async def _set_state(
        self, machine_id: str, kv: KeyValue, machine: Machine, state: MachineState
    ) -> bool:
        """Writes `state` over the record `kv` (which holds `machine`) if neither the record nor
        the heartbeat's presence changed."""
        heartbeat_key = keys.heartbeat(machine_id)
        down_since = datetime.now(UTC) if state is MachineState.DOWN else None
        updated = Machine.model_validate(
            {**dict(machine), "state": state, "down_since": down_since}
        )
        heartbeat_is_as_seen = (
            key_missing(heartbeat_key) if state is MachineState.DOWN else key_exists(heartbeat_key)
        )
        result = await self._store.txn(
            [mod_revision_is(kv.key, kv.mod_revision), heartbeat_is_as_seen],
            [Put(kv.key, to_json(updated))],
        )
        return result.succeeded
