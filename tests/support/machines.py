"""Machines, heartbeats on real leases and store polling, for the broker and health tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

from tether.model import AgentHeartbeat, Machine, Resources, Topology, from_json, to_json
from tether.store import Store, keys
from tether.store.lease import LeaseKeeper

T = TypeVar("T")


def make_machine(machine_id: str = "m1", dc: str = "dc1", **fields: Any) -> Machine:
    """A machine as its agent would announce it; `fields` override any field."""
    values: dict[str, Any] = {
        "id": machine_id,
        "hostname": f"{machine_id}.example",
        "topology": Topology(region="r1", dc=dc, msb="msb1", rack="r1"),
        "hardware_type": "std",
        "capacity": Resources(cpu=4000, memory_mib=8192, disk_gib=100),
        "attributes": {"os": "linux"},
    }
    return Machine(**(values | fields))


def heartbeat_of(machine: Machine) -> AgentHeartbeat:
    return AgentHeartbeat(
        machine=machine, address="http://127.0.0.1:7001", pid=1234, started_at=datetime.now(UTC)
    )


@asynccontextmanager
async def heartbeating(
    store: Store, machine: Machine, ttl_s: int = 3
) -> AsyncIterator[LeaseKeeper]:
    """Puts `machine`'s heartbeat on a kept-alive lease, as an agent does; revokes it at the end
    unless the test already stopped the keeper."""
    keeper = LeaseKeeper(store, ttl_s)
    lease = await keeper.start()
    try:
        await store.put(keys.heartbeat(machine.id), to_json(heartbeat_of(machine)), lease=lease)
        yield keeper
    finally:
        await keeper.stop()


async def read_machine(store: Store, machine_id: str) -> Machine | None:
    kv = await store.get(keys.machine(machine_id))
    return None if kv is None else from_json(Machine, kv.value, stored=True)
