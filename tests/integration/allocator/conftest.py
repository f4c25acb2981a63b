"""The allocator tests' region (four machines, entitlement ads, job ads/web) and a replica
in-process on a real store, called over real gRPC on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from tests.support.allocator_builders import REGION_MSBS, entitlement, job, machine, put_job
from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.model import Allocation, to_json
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import Store, keys, open_store


@pytest.fixture
async def region(store: Store) -> Store:
    """Four 4 GiB machines, one per MSB, with empty allocation records; entitlement ads; job
    ads/web of 3 tasks of 1 GiB."""
    for n in range(REGION_MSBS):
        machine_id = f"m{n}"
        await store.put(keys.machine(machine_id), to_json(machine(machine_id, msb=f"msb{n}")))
        await store.put(keys.allocation(machine_id), to_json(Allocation(machine=machine_id)))
    await store.put(keys.entitlement("ads"), to_json(entitlement()))
    await put_job(store, job())
    return store


@pytest.fixture
async def allocator(region: Store, store_url: str) -> AsyncIterator[Allocator]:
    """A replica on its own connection to the region's store, which it closes on `stop()`."""
    # Tidies every 0.2 s (idle machines, tasks held twice): a test waits for that, not 5 s.
    settings = AllocatorSettings(id="allocator-1", lease_ttl_s=3, idle_check_s=0.2)
    service = Allocator(open_store(store_url), settings)
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


@pytest.fixture
async def client(allocator: Allocator) -> AsyncIterator[allocator_pb2_grpc.AllocatorAsyncStub]:
    async with grpc.aio.insecure_channel(allocator.address) as channel:
        yield allocator_pb2_grpc.AllocatorStub(channel)
