"""Machines as the API and the dashboard show them: state, resources held, heartbeat."""

from __future__ import annotations

from tether.frontend import records
from tether.frontend.schemas.machines import MachineView
from tether.model import Machine
from tether.store import Store, keys


async def machine_views(store: Store) -> list[MachineView]:
    """Every machine by id, with capacity, allocated and free resources and heartbeat presence."""
    machines = await records.scan(store, keys.MACHINES, Machine)
    allocations = await records.allocations(store)
    alive = {keys.last_segment(kv.key) for kv in (await store.range(keys.HEARTBEATS)).kvs}
    return [
        MachineView.of(
            machine, allocations.get(machine.id, records.MachineAllocation()), machine.id in alive
        )
        for machine in sorted(machines, key=lambda machine: machine.id)
    ]
