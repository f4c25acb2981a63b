"""Two allocators placing 200 jobs at once on a nearly full region: no machine over-committed."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from tests.support.allocator_builders import entitlement, job, machine
from tests.support.machines import eventually
from tether.model import (
    Allocation,
    AllocationEntry,
    AllocatorEndpoint,
    Resources,
    from_json,
    to_json,
)
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import KeyValue, Store, keys

REPO = Path(__file__).resolve().parents[3]
MACHINES = 20
JOBS = 200
CAPACITY_MIB = 8192
# Each machine already holds another team's tasks: 1 to 4 GiB stay free.
FILLED_MIB = (4096, 5120, 6144, 7168)
TASK_MIB = (512, 1024, 1536)


@asynccontextmanager
async def replicas(store: Store, store_url: str, log_dir: Path) -> AsyncIterator[list[str]]:
    """Runs two `tether allocator` processes on the store; yields their gRPC addresses."""
    ids = ["allocator-a", "allocator-b"]
    processes: list[asyncio.subprocess.Process] = []
    try:
        for replica_id in ids:
            command = ["allocator", "--id", replica_id, "--port", "0", "--store", store_url]
            with (log_dir / f"{replica_id}.log").open("wb") as log:
                processes.append(
                    await asyncio.create_subprocess_exec(
                        sys.executable,
                        "-m",
                        "tether.cli.main",
                        *command,
                        cwd=REPO,
                        stdout=log,
                        stderr=asyncio.subprocess.STDOUT,
                    )
                )
        yield [
            await registered(store, replica_id, process, log_dir)
            for replica_id, process in zip(ids, processes, strict=True)
        ]
    finally:
        for process in processes:
            if process.returncode is None:
                process.terminate()
        for process in processes:
            try:
                await asyncio.wait_for(process.wait(), 10)
            except TimeoutError:
                process.kill()
                await process.wait()


async def registered(
    store: Store, replica_id: str, process: asyncio.subprocess.Process, log_dir: Path
) -> str:
    """The address a replica registers under allocators/ once it serves."""

    async def registration() -> KeyValue | None:
        kv = await store.get(keys.allocator(replica_id))
        if kv is None and process.returncode is not None:
            log = (log_dir / f"{replica_id}.log").read_text()
            pytest.fail(f"{replica_id} exited with {process.returncode}:\n{log}")
        return kv

    kv = await eventually(
        registration,
        lambda found: found is not None,
        timeout_s=30,
        what=f"{replica_id}'s registration",
    )
    assert kv is not None
    return from_json(AllocatorEndpoint, kv.value, stored=True).address


async def nearly_full_region(store: Store) -> None:
    for n in range(MACHINES):
        machine_id = f"m{n:02}"
        await store.put(
            keys.machine(machine_id),
            to_json(machine(machine_id, msb=f"msb{n % 4}", memory=CAPACITY_MIB, cpu=64000)),
        )
        filler = AllocationEntry(
            job="other/filler", index=n, resources=Resources(memory_mib=FILLED_MIB[n % 4])
        )
        await store.put(
            keys.allocation(machine_id),
            to_json(Allocation(machine=machine_id, tasks={filler.task_id: filler})),
        )
    await store.put(keys.entitlement("race"), to_json(entitlement("race")))
    for i in range(JOBS):
        record = job(f"j{i}", entitlement="race", count=1 + i % 2, memory=TASK_MIB[i % 3], cpu=100)
        await store.put(keys.job("race", f"j{i}"), to_json(record))


async def test_two_allocators_never_over_commit(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    await nearly_full_region(store)
    async with replicas(store, store_url, tmp_path) as addresses:
        channels = [grpc.aio.insecure_channel(address) for address in addresses]
        try:
            stubs = [allocator_pb2_grpc.AllocatorStub(channel) for channel in channels]
            # Each job goes to one replica, alternating, all at once.
            responses = await asyncio.gather(
                *(
                    stubs[i % 2].Place(
                        pb.PlaceRequest(
                            job_handle=f"race/j{i}",
                            task_indexes=range(1 + i % 2),
                            job_generation=1,
                            request_id=f"place-j{i}",
                        ),
                        timeout=60,
                    )
                    for i in range(JOBS)
                )
            )
        finally:
            for channel in channels:
                await channel.close(None)

    stored = {
        keys.last_segment(kv.key): from_json(Allocation, kv.value, stored=True)
        for kv in (await store.range(keys.ALLOCATIONS)).kvs
    }
    capacity = Resources(cpu=64000, memory_mib=CAPACITY_MIB)
    for machine_id, allocation in stored.items():
        assert allocation.used().fits_in(capacity), f"{machine_id} is over-committed"

    # What the responses say was placed is exactly what the store holds, each task once.
    answered = {
        (f"race/j{i}", p.task_index, p.machine_id)
        for i, response in enumerate(responses)
        for p in response.placements
    }
    held = [
        (entry.job, entry.index, machine_id)
        for machine_id, allocation in stored.items()
        for entry in allocation.tasks.values()
        if entry.entitlement == "race"
    ]
    assert Counter((job_handle, index) for job_handle, index, _ in held).most_common(1)[0][1] == 1
    assert set(held) == answered
    assert answered, "a nearly full region still takes some tasks"

    free = [capacity - allocation.used() for allocation in stored.values()]
    no_room = 0
    for i, response in enumerate(responses):
        requested = [p.task_index for p in response.placements]
        requested += [u.task_index for u in response.unplaced]
        assert sorted(requested) == list(range(1 + i % 2))
        # One successful commit per response that placed anything; every other attempt lost.
        assert response.attempts - response.conflicts == (1 if response.placements else 0)
        for unplaced in response.unplaced:
            if unplaced.reason.startswith("no machine fits"):
                no_room += 1
                # Space only shrank since: the task still fits nowhere.
                need = Resources(cpu=100, memory_mib=TASK_MIB[i % 3])
                assert not any(need.fits_in(left) for left in free), unplaced.reason
            else:
                assert unplaced.reason.startswith("gave up after 10 attempts"), unplaced.reason
    assert no_room > 0, "demand exceeds the free capacity"
    conflicts = sum(response.conflicts for response in responses)
    print(f"placed {len(answered)} tasks, {no_room} found no room, {conflicts} conflicts")
