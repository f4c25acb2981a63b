"""The scheduler's allocator client: discovery in the store, failover, error mapping."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from tests.integration.scheduler.fake_allocator import serve_fake_allocator
from tests.integration.scheduler.helpers import make_job, make_machine, put
from tether.config import TlsSettings
from tether.model import AllocatorEndpoint, MachineState
from tether.scheduler.allocator_client import (
    AllocatorClient,
    AllocatorUnavailable,
    JobNotFound,
    StaleGeneration,
    replica_order,
)
from tether.store import Store, keys


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def register_dead_replica(store: Store, replica: str) -> None:
    endpoint = AllocatorEndpoint(
        id=replica, address=f"127.0.0.1:{closed_port()}", pid=os.getpid(), since=datetime.now(UTC)
    )
    await put(store, keys.allocator(replica), endpoint)


@pytest.fixture
async def client(store: Store) -> AsyncIterator[AllocatorClient]:
    allocator_client = AllocatorClient(store, timeout_s=3, tls=TlsSettings())
    try:
        yield allocator_client
    finally:
        await allocator_client.stop()


async def test_places_through_any_live_replica_and_skips_dead_ones(
    store: Store, client: AllocatorClient
) -> None:
    for machine_id in ("m1", "m2"):
        await put(store, keys.machine(machine_id), make_machine(machine_id))
    await put(store, keys.job("ads", "web"), make_job("ads", "web", 3))
    # The home replica of "ads": every call tries the dead replica before the live one.
    assert replica_order("ads", ["a-dead", "b-live"]) == ["a-dead", "b-live"]
    await register_dead_replica(store, "a-dead")
    async with serve_fake_allocator(store, "b-live") as allocator:
        await client.start()
        first = await client.place("ads/web", [0, 1], 1, "req-1")
        again = await client.place("ads/web", [1, 0], 1, "req-1")
        released = await client.release("ads/web", [0])

    assert first.placements == {0: "m1", 1: "m2"}
    assert first.unplaced == {}
    assert again == first
    assert released == 1
    assert allocator.release_calls == [("ads/web", [0])]
    assert [call.request_id for call in allocator.place_calls] == ["req-1", "req-1"]
    assert allocator.place_calls[0].job_generation == 1


async def test_unplaced_tasks_come_back_with_their_reason(
    store: Store, client: AllocatorClient
) -> None:
    await put(store, keys.machine("m1"), make_machine("m1", MachineState.DOWN))
    await put(store, keys.job("ads", "web"), make_job("ads", "web", 1))
    async with serve_fake_allocator(store) as _:
        await client.start()
        result = await client.place("ads/web", [0], 1, "req")
    assert result.placements == {}
    assert result.unplaced == {0: "no machine is up"}


async def test_allocator_refusals_map_to_distinct_errors(
    store: Store, client: AllocatorClient
) -> None:
    await put(store, keys.job("ads", "web"), make_job("ads", "web", 1, generation=2))
    async with serve_fake_allocator(store) as _:
        await client.start()
        with pytest.raises(StaleGeneration, match="generation 2"):
            await client.place("ads/web", [0], 1, "req")
        with pytest.raises(JobNotFound, match="no job ads/nope"):
            await client.place("ads/nope", [0], 1, "req")


async def test_no_registered_replica_is_unavailable(client: AllocatorClient) -> None:
    await client.start()
    with pytest.raises(AllocatorUnavailable, match="no allocator is registered"):
        await client.release("ads/web", [])


async def test_every_replica_down_is_unavailable(store: Store, client: AllocatorClient) -> None:
    await register_dead_replica(store, "dead-1")
    await register_dead_replica(store, "dead-2")
    await client.start()
    with pytest.raises(AllocatorUnavailable, match="every allocator failed") as failure:
        await client.release("ads/web", [])
    assert "dead-1" in str(failure.value)
    assert "dead-2" in str(failure.value)
