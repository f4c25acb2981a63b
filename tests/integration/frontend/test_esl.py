"""The scheduling library's choices, through the real SDK, frontend and allocator: which
machines each policy sets its label on, and with what capacity. (The end-to-end test runs
gang, co-location and anti-affinity on a whole region with task processes.)"""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.frontend.conftest import Region
from tests.support.allocations import put_allocation
from tests.support.allocator_builders import machine
from tether import esl
from tether.allocator.service import Allocator
from tether.model import Allocation, Resources, from_json, to_json
from tether.model.ephemeral import EphemeralResource
from tether.sdk import TetherClient
from tether.store import keys

PER_TASK = {"cpu": 1000, "memory_mib": 512}
"""Four fit an empty machine (4000 millicores)."""
USED = {"m0": 3, "m1": 0, "m2": 2, "m3": 0}
"""Tasks of team-b already on each machine."""


@pytest.fixture
async def machines(region: Region) -> None:
    """Four machines, two in zone a, some partly used by team-b's tasks."""
    for n, (machine_id, used) in enumerate(USED.items()):
        zone = "a" if n < 2 else "b"
        record = machine(machine_id, msb=f"msb{n}", attributes={"zone": zone})
        await region.store.put(keys.machine(machine_id), to_json(record))
        held = {f"team-b/filler/{i}": Resources(cpu=1000, memory_mib=512) for i in range(used)}
        await put_allocation(region.store, Allocation(machine=machine_id), held)
    await region.cache_caught_up()


async def stored(region: Region, label: str) -> dict[str, int] | None:
    """The label's capacity per machine named by a grant; None: only broad grants."""
    kv = await region.store.get(keys.ephemeral_resource("team-a", label))
    assert kv is not None
    record = from_json(EphemeralResource, kv.value, stored=True)
    return record.machine_grants() or None


def sdk(region: Region) -> TetherClient:
    return TetherClient(str(region.api.base_url), "alice-token")


async def test_bin_pack_fills_the_fullest_machines_first(
    region: Region, allocator: Allocator
) -> None:
    with sdk(region) as client:
        extra = await asyncio.to_thread(esl.bin_pack, client, "team-a", "packed", 4, PER_TASK)
        assert extra == {"packed": 1}
        # m0 has room for 1, m2 for 2, then an empty one for the last.
        assert await stored(region, "packed") == {"m0": 1, "m2": 2, "m1": 1}
        assert (
            await asyncio.to_thread(esl.bin_pack, client, "team-a", "too-many", 20, PER_TASK)
            is None
        )
    assert await region.store.get(keys.ephemeral_resource("team-a", "too-many")) is None


async def test_load_balance_caps_each_machine_at_its_share(
    region: Region, allocator: Allocator
) -> None:
    with sdk(region) as client:
        await asyncio.to_thread(esl.load_balance, client, "team-a", "spread", 10)
        (state,) = await asyncio.to_thread(client.get_cluster_state, "team-a", label="spread")
    assert {share.machine: share.capacity for share in state.machines} == dict.fromkeys(USED, 3)


async def test_soft_constraint_falls_back_when_the_preferred_machines_are_full(
    region: Region, allocator: Allocator
) -> None:
    zone_a = [{"attribute": "zone", "op": "==", "value": "a"}]
    with sdk(region) as client:
        # Zone a (m0, m1) has room for 1 + 4 tasks.
        await asyncio.to_thread(esl.soft_constraint, client, "team-a", "near", 5, PER_TASK, zone_a)
        (near,) = await asyncio.to_thread(client.get_cluster_state, "team-a", label="near")
        await asyncio.to_thread(esl.soft_constraint, client, "team-a", "far", 6, PER_TASK, zone_a)
        (far,) = await asyncio.to_thread(client.get_cluster_state, "team-a", label="far")
    assert [share.machine for share in near.machines] == ["m0", "m1"]
    assert [share.machine for share in far.machines] == list(USED)
