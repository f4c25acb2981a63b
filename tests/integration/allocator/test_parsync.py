"""An allocator whose index follows allocations/ by partitions (ParSync) on a real store: it
sees another writer's change only once the change's partition is read again, and a plan made on
what it has not seen yet fails its commit's compares and is made again on the machines read at
once: never an overcommit."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from tests.integration.allocator.test_allocator import machines_of
from tests.support.allocations import read_allocations
from tests.support.allocator_builders import entitlement, job, machine, put_job
from tests.support.waiting import eventually
from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.model import Resources, to_json
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import Store, keys, open_store


async def replica(store_url: str, replica_id: str, **settings: object) -> Allocator:
    service = Allocator(
        open_store(store_url),
        AllocatorSettings(id=replica_id, lease_ttl_s=3, **settings),  # type: ignore[arg-type]
    )
    await service.start()
    return service


@pytest.fixture
async def stale(region: Store, store_url: str) -> AsyncIterator[Allocator]:
    """A ParSync replica that reads its two partitions again only every 10 minutes."""
    service = await replica(
        store_url, "allocator-p", sync="parsync", sync_period_s=600, sync_partitions=2
    )
    try:
        yield service
    finally:
        await service.stop()


async def place(address: str, handle: str, indexes: list[int]) -> pb.PlaceResponse:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = allocator_pb2_grpc.AllocatorStub(channel)
        return await stub.Place(
            pb.PlaceRequest(job_handle=handle, task_indexes=indexes, job_generation=1)
        )


async def test_a_plan_on_what_it_has_not_read_yet_conflicts_and_is_made_again(
    region: Store, store_url: str, stale: Allocator
) -> None:
    assert stale.parsync is not None
    read_at = list(stale.parsync.read_at)
    # Another replica fills m0, the machine the stale one would choose first, with 3.5 GiB.
    await put_job(region, job("big", count=1, memory=3584))
    other = await replica(store_url, "allocator-w")
    try:
        filled = machines_of(await place(other.address, "ads/big", [0]))
    finally:
        await other.stop()
    assert filled == {0: "m0"}
    placed = await place(stale.address, "ads/web", [0])
    assert stale.parsync.read_at == read_at, "no partition was read again meanwhile"
    assert (placed.attempts, placed.conflicts) == (2, 1), "the stale plan's commit failed"
    assert machines_of(placed) == {0: "m1"}
    for machine_id, held in (await read_allocations(region)).items():
        assert held.used().fits_in(Resources(cpu=4000, memory_mib=4096)), machine_id


async def test_another_writers_change_shows_once_its_partition_is_read_again(
    region: Store, store_url: str
) -> None:
    service = await replica(
        store_url, "allocator-p", sync="parsync", sync_period_s=1.0, sync_partitions=2
    )
    try:
        assert service.parsync is not None
        entry = keys.allocation_entry("m3", "ml", "filler", 0)
        await region.put(entry, to_json(Resources(memory_mib=4096)))
        written = await region.revision()
        await service.parsync.wait_for(written)
        assert min(service.parsync.read_at) >= written
        row = service.index.row_of["m3"]
        assert int(service.index.task_count[row]) == 1, "the entry is in the index"
        await region.delete(entry)
        deleted = await region.revision()
        await service.parsync.wait_for(deleted)
        assert int(service.index.task_count[row]) == 0, "and gone with it"
        assert service.parsync.refreshes >= 4

        async def read_again() -> int:
            return service.parsync.refreshes if service.parsync else 0

        count = service.parsync.refreshes
        await eventually(read_again, lambda n: n >= count + 2, what="partitions read on a period")
    finally:
        await service.stop()


async def test_partitions_read_every_machines_records_whatever_dashes_do_to_key_order(
    store: Store, store_url: str
) -> None:
    # Keys sort m1, m1-a, m1-a/..., m1/...: the partitions split between m1 and m1-a.
    for machine_id in ("m1", "m1-a", "m2"):
        await store.put(keys.machine(machine_id), to_json(machine(machine_id)))
    await store.put(keys.entitlement("ads"), to_json(entitlement()))
    for number, machine_id in enumerate(("m1", "m1-a", "m2")):
        for task in range(2):
            entry = keys.allocation_entry(machine_id, "ml", f"filler{number}", task)
            await store.put(entry, to_json(Resources(memory_mib=512)))
    service = await replica(
        store_url, "allocator-p", sync="parsync", sync_period_s=0.3, sync_partitions=3
    )
    try:
        assert service.parsync is not None
        assert service.parsync.bounds(1) == ("m1-a", "m2")
        index = service.index

        def held() -> dict[str, int]:
            return {m: int(index.task_count[index.row_of[m]]) for m in ("m1", "m1-a", "m2")}

        assert held() == {"m1": 2, "m1-a": 2, "m2": 2}
        # Partitions read again and again leave every machine's entries as the store has them.
        count = service.parsync.refreshes
        await eventually(
            lambda: service.parsync.refreshes if service.parsync else 0,
            lambda n: n >= count + 6,
            what="two rounds of partitions",
        )
        assert held() == {"m1": 2, "m1-a": 2, "m2": 2}
        await store.delete(keys.allocation_entry("m1", "ml", "filler0", 1))
        await service.parsync.wait_for(await store.revision())
        assert held() == {"m1": 1, "m1-a": 2, "m2": 2}
    finally:
        await service.stop()
