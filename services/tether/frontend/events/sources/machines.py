"""Machines: up, draining, in maintenance, down, decommissioned."""

from __future__ import annotations

from tether.frontend.events.sources.base import Change, Source, read
from tether.model import Machine, MachineState
from tether.model.event import EventKind, RegionEvent, RegionObject
from tether.store import KeyValue, keys

_KIND_OF_STATE = {
    MachineState.UP: EventKind.MACHINE_UP,
    MachineState.DRAINING: EventKind.MACHINE_DRAINING,
    MachineState.MAINTENANCE: EventKind.MACHINE_MAINTENANCE,
    MachineState.DOWN: EventKind.MACHINE_DOWN,
    MachineState.DECOMMISSIONED: EventKind.MACHINE_DECOMMISSIONED,
}


class Machines(Source[MachineState]):
    prefix = keys.MACHINES

    def digest(self, kv: KeyValue) -> MachineState | None:
        machine = read(Machine, kv)
        return None if machine is None else machine.state

    def state(self, key: str, digest: MachineState) -> RegionObject:
        return RegionObject(what="machine", machine=self.name(key), state=digest.value)

    def events(
        self, key: str, before: MachineState | None, after: MachineState | None, change: Change
    ) -> list[RegionEvent]:
        if after is None or after is before:
            return []
        # The feed gives the event to the machine's owner, if any (`Owners`).
        detail = "joined the region" if before is None else f"was {before.value}"
        kind = _KIND_OF_STATE[after]
        return [change.event(kind, machine=self.name(key), state=after.value, detail=detail)]
