"""An allocator replica on a real store returns a decommissioned machine to the free pool at
once, so its capacity stops counting for its entitlement; an idle one waits for the delay."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.support.allocations import read_allocations
from tests.support.allocator_builders import entitlement, machine
from tests.support.waiting import eventually
from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.model import Allocation, MachineState, to_json
from tether.store import Store, keys, open_store


async def test_a_decommissioned_machine_leaves_its_entitlement_at_once(
    store: Store, store_url: str
) -> None:
    now = datetime.now(UTC)
    await store.put(keys.entitlement("ads"), to_json(entitlement(host_profile="web")))
    for machine_id, state in (("m0", MachineState.DECOMMISSIONED), ("m1", MachineState.UP)):
        await store.put(keys.machine(machine_id), to_json(machine(machine_id, state=state)))
        # Both just went idle: only the decommissioned one is returned before the delay.
        owned = Allocation(
            machine=machine_id, entitlement="ads", host_profile="web", idle_since=now
        )
        await store.put(keys.allocation(machine_id), to_json(owned))
    settings = AllocatorSettings(id="allocator-1", lease_ttl_s=3, idle_check_s=0.1)
    allocator = Allocator(open_store(store_url), settings)
    await allocator.start()
    try:
        stored = await eventually(
            lambda: read_allocations(store),
            lambda found: found["m0"].record is not None and found["m0"].record.entitlement is None,
            timeout_s=10,
            what="m0 back in the free pool",
        )
    finally:
        await allocator.stop()
    assert stored["m0"].record == Allocation(machine="m0")
    assert stored["m1"].record is not None
    assert stored["m1"].record.entitlement == "ads"
