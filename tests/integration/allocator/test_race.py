"""Allocator processes racing on one store: two on a nearly full region, three growing
entitlements from the free pool on etcd; no machine over-committed, no quota exceeded."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import pytest

from tests.support.allocations import Stored, put_allocation, read_allocations
from tests.support.allocator_builders import entitlement, job, machine
from tests.support.region import create_region
from tests.support.waiting import eventually
from tether.model import (
    Allocation,
    AllocatorEndpoint,
    Entitlement,
    Job,
    Machine,
    Placement,
    Quota,
    Resources,
    from_json,
    to_json,
)
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import KeyValue, Store, keys, open_store
from tether.store.etcd_server import EtcdServer

REPO = Path(__file__).resolve().parents[3]
MACHINES = 20
JOBS = 200
CAPACITY_MIB = 8192
# Each machine already holds another team's tasks: 1 to 4 GiB stay free.
FILLED_MIB = (4096, 5120, 6144, 7168)
TASK_MIB = (512, 1024, 1536)


@asynccontextmanager
async def replicas(
    store: Store, store_url: str, log_dir: Path, ids: list[str]
) -> AsyncIterator[list[str]]:
    """Runs one `tether allocator` process per id on the store; yields their gRPC addresses."""
    await create_region(store)
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


def job_of(task_id: str) -> str:
    """The job handle `<entitlement>/<job>` of a task id `<entitlement>/<job>/<index>`."""
    return task_id.rpartition("/")[0]


def owner_of(stored: Stored) -> str | None:
    """The entitlement a machine belongs to; None for the free pool or a missing record."""
    return None if stored.record is None else stored.record.entitlement


async def nearly_full_region(store: Store) -> None:
    for n in range(MACHINES):
        machine_id = f"m{n:02}"
        await store.put(
            keys.machine(machine_id),
            to_json(machine(machine_id, msb=f"msb{n % 4}", memory=CAPACITY_MIB, cpu=64000)),
        )
        filler = {f"other/filler/{n}": Resources(memory_mib=FILLED_MIB[n % 4])}
        await put_allocation(store, Allocation(machine=machine_id), filler)
    await store.put(keys.entitlement("race"), to_json(entitlement("race")))
    for i in range(JOBS):
        record = job(f"j{i}", entitlement="race", count=1 + i % 2, memory=TASK_MIB[i % 3], cpu=100)
        await store.put(keys.job("race", f"j{i}"), to_json(record))


async def test_two_allocators_never_over_commit(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    await nearly_full_region(store)
    async with replicas(store, store_url, tmp_path, ["allocator-a", "allocator-b"]) as addresses:
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

    stored = await read_allocations(store)
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
        (job_of(task), int(task.rpartition("/")[2]), machine_id)
        for machine_id, allocation in stored.items()
        for task in allocation.tasks
        if task.startswith("race/")
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
        # A response that placed anything committed once; the conflicts were failed attempts.
        assert response.conflicts <= response.attempts - (1 if response.placements else 0)
        for unplaced in response.unplaced:
            if unplaced.reason.startswith("no machine fits"):
                no_room += 1
                # Space only shrank since: the task still fits nowhere.
                need = Resources(cpu=100, memory_mib=TASK_MIB[i % 3])
                assert not any(need.fits_in(left) for left in free), unplaced.reason
            else:
                assert unplaced.reason.startswith("gave up after 10 conflicts"), unplaced.reason
    assert no_room > 0, "demand exceeds the free capacity"
    conflicts = sum(response.conflicts for response in responses)
    print(f"placed {len(answered)} tasks, {no_room} found no room, {conflicts} conflicts")


# --- three allocators growing entitlements from the free pool, on etcd ------------------------

GROWTH_MACHINES = 48
GROWTH_JOBS = 240
STD = Resources(cpu=8000, memory_mib=16384)
BIG_MACHINE = Resources(cpu=16000, memory_mib=32768)
GROWTH_TASK_MIB = (1024, 2048, 4096)
GROWTH_TASK_CPU = 250
# Entitlements racing for the free pool. alpha starts with a few half-full machines and is
# bounded by a memory quota; beta by whole machines per hardware type and carries a host
# profile; gamma may only use dc2, where the pool runs dry.
RACERS = (
    Entitlement(name="alpha", quota=Quota(resources=Resources(cpu=10**9, memory_mib=160 * 1024))),
    Entitlement(
        name="beta",
        quota=Quota(
            resources=Resources(cpu=10**9, memory_mib=10**9), machines={"std": 5, "big": 2}
        ),
        host_profile="batch",
    ),
    Entitlement(
        name="gamma",
        quota=Quota(resources=Resources(cpu=10**9, memory_mib=10**9)),
        allowed_dcs=["dc2"],
    ),
)
# Machines owned before the race: m00..m11 by `other` (half full: the racers must not take the
# other half), m12..m15 by alpha (half full with alpha's own seed tasks). The rest is the pool.
OTHER_OWNED = range(12)
ALPHA_OWNED = range(12, 16)


def growth_machine(n: int) -> Machine:
    hardware = "big" if n % 3 == 0 else "std"
    capacity = BIG_MACHINE if hardware == "big" else STD
    return machine(
        f"m{n:02}",
        dc=f"dc{1 + n % 4 // 2}",
        msb=f"msb{n % 4}",
        rack=f"r{n % 8}",
        memory=capacity.memory_mib,
        cpu=capacity.cpu,
        hardware=hardware,
    )


def pre_owned(n: int, capacity: Resources) -> tuple[Allocation, dict[str, Resources]]:
    """Half of the machine held by one task of the owner's seed job."""
    owner = "other" if n in OTHER_OWNED else "alpha"
    half = Resources(cpu=capacity.cpu // 2, memory_mib=capacity.memory_mib // 2)
    return Allocation(machine=f"m{n:02}", entitlement=owner), {f"{owner}/seed/{n}": half}


async def growing_region(store: Store) -> dict[str, Machine]:
    """The machines, their allocation records, the entitlements and the racers' jobs."""
    machines = {}
    for n in range(GROWTH_MACHINES):
        record = growth_machine(n)
        machines[record.id] = record
        owned = n in OTHER_OWNED or n in ALPHA_OWNED
        await store.put(keys.machine(record.id), to_json(record))
        if owned:
            await put_allocation(store, *pre_owned(n, record.capacity))
        else:
            await put_allocation(store, Allocation(machine=record.id))
    for holder in (*RACERS, entitlement("other")):
        await store.put(keys.entitlement(holder.name), to_json(holder))
    for i in range(GROWTH_JOBS):
        owner = RACERS[i % len(RACERS)].name
        spec = job(
            f"j{i}",
            entitlement=owner,
            count=growth_count(i),
            memory=GROWTH_TASK_MIB[i // len(RACERS) % len(GROWTH_TASK_MIB)],
            cpu=GROWTH_TASK_CPU,
        )
        await store.put(keys.job(owner, f"j{i}"), to_json(spec))
    return machines


def growth_count(i: int) -> int:
    return 1 + i % 4


def growth_handle(i: int) -> str:
    return f"{RACERS[i % len(RACERS)].name}/j{i}"


@pytest.fixture
async def etcd_store(etcd_server: EtcdServer) -> AsyncIterator[Store]:
    """A store on a fresh etcd server only: the race must run on a real etcd."""
    async with open_store(etcd_server.url) as opened:
        yield opened


@pytest.mark.timeout(60)
async def test_three_allocators_grow_entitlements_from_the_pool_on_etcd(
    etcd_store: Store, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    store = etcd_store
    machines = await growing_region(store)
    before = await read_allocations(store)
    ids = ["allocator-a", "allocator-b", "allocator-c"]
    async with replicas(store, etcd_server.url, tmp_path, ids) as addresses:
        channels = [grpc.aio.insecure_channel(address) for address in addresses]
        try:
            stubs = [allocator_pb2_grpc.AllocatorStub(channel) for channel in channels]
            # Every replica places jobs of every entitlement, all at once.
            responses = await asyncio.gather(
                *(
                    stubs[(i + i // len(RACERS)) % len(stubs)].Place(
                        pb.PlaceRequest(
                            job_handle=growth_handle(i),
                            task_indexes=range(growth_count(i)),
                            job_generation=1,
                            request_id=f"place-j{i}",
                        ),
                        timeout=60,
                    )
                    for i in range(GROWTH_JOBS)
                )
            )
        finally:
            for channel in channels:
                await channel.close(None)
    stored = await read_allocations(store)

    # No machine over-committed, in any dimension.
    for machine_id, allocation in stored.items():
        used, capacity = allocation.used(), machines[machine_id].capacity
        assert used.fits_in(capacity), f"{machine_id}: {used} on {capacity}"

    # A machine holds only tasks of its owner; the free pool holds none.
    for machine_id, allocation in stored.items():
        owner = owner_of(allocation)
        strangers = [task for task in allocation.tasks if task.split("/", 1)[0] != owner]
        assert not strangers, f"{machine_id} of {owner} holds {strangers}"

    # Each task is held once, exactly where the responses said.
    held = Counter(task for allocation in stored.values() for task in allocation.tasks)
    assert [task for task, times in held.items() if times > 1] == []
    answered = {
        f"{growth_handle(i)}/{p.task_index}": p.machine_id
        for i, response in enumerate(responses)
        for p in response.placements
    }
    racing = {
        task: machine_id
        for machine_id, allocation in stored.items()
        for task in allocation.tasks
        if not job_of(task).endswith("/seed")
    }
    assert racing == answered

    # Machines owned before the race keep their owner and their seed tasks.
    for machine_id, allocation in before.items():
        if owner_of(allocation) is not None:
            assert owner_of(stored[machine_id]) == owner_of(allocation), machine_id
            assert set(allocation.tasks) <= set(stored[machine_id].tasks), machine_id

    # Quotas: resources, machines per hardware type, datacenters; joined machines carry the
    # entitlement's host profile.
    for racer in RACERS:
        owned = {m: a for m, a in stored.items() if owner_of(a) == racer.name}
        usage = Resources()
        for allocation in owned.values():
            usage = usage + allocation.used()
        assert usage.fits_in(racer.quota.resources), f"{racer.name} holds {usage}"
        by_type = Counter(machines[m].hardware_type for m in owned)
        if racer.quota.machines:
            over = {t: n for t, n in by_type.items() if n > racer.quota.machines.get(t, 0)}
            assert not over, f"{racer.name} owns {dict(by_type)} > {racer.quota.machines}"
        if racer.allowed_dcs:
            assert {machines[m].topology.dc for m in owned} <= set(racer.allowed_dcs)
        grown = owned.keys() - {m for m, a in before.items() if owner_of(a) == racer.name}
        assert grown, f"{racer.name} took no machine from the free pool"
        # An owned machine has a record: owner_of is None without one.
        profiles = {record.host_profile for m in grown if (record := owned[m].record) is not None}
        assert profiles == {racer.host_profile}

    # Every requested task is answered once; a request that placed anything committed once.
    no_room = gave_up = 0
    for i, response in enumerate(responses):
        requested = [p.task_index for p in response.placements]
        requested += [u.task_index for u in response.unplaced]
        assert sorted(requested) == list(range(growth_count(i))), growth_handle(i)
        assert response.conflicts <= response.attempts - (1 if response.placements else 0)
        for unplaced in response.unplaced:
            assert unplaced.reason, growth_handle(i)
            gave_up += unplaced.reason.startswith("gave up after")
            no_room += not unplaced.reason.startswith("gave up after")
    assert no_room > 0, "demand exceeds what the quotas and the pool allow"
    conflicts = sum(response.conflicts for response in responses)
    retried = sum(1 for response in responses if response.conflicts and response.placements)
    print(
        f"placed {len(answered)} tasks; {no_room} unplaced for room or quota, {gave_up} gave "
        f"up; {conflicts} conflicts, {retried} requests placed after a conflict"
    )
    # Three replicas choosing from the same index pick the same best machines first.
    assert conflicts > 0, "the replicas never raced for a machine"


# --- three allocators at the edge of quotas, on etcd ----------------------------------------

ROUNDS = 8
# A `tight` entitlement's machines have these MiB free: best fit puts a task of each size of
# QUOTA_EDGE_MIB on a different machine, so three racing replicas touch three distinct records.
TIGHT_FREE_MIB = (1536, 3072, 6144)
QUOTA_EDGE_MIB = (1024, 2048, 4096)
TIGHT_ROOM_MIB = 4096
"""What the quota leaves: each task alone fits, any two together do not."""
CAPPED_DCS = ("x", "y", "z")


Held = tuple[Allocation, dict[str, Resources]]
"""A machine's allocation record and its entries by task id."""


def tight_records(r: int) -> tuple[Entitlement, list[Machine], list[Held]]:
    """Entitlement tight<r>, owning three machines whose seed tasks leave TIGHT_FREE_MIB free."""
    name = f"tight{r}"
    machines: list[Machine] = []
    allocations: list[Held] = []
    held = 0
    for k, free in enumerate(TIGHT_FREE_MIB):
        record = machine(
            f"t{r}-{k}", dc=f"dct{r}", msb=f"msbt{r}", rack=f"rt{r}", memory=16384, cpu=8000
        )
        seed = Resources(cpu=1000, memory_mib=16384 - free)
        held += seed.memory_mib
        machines.append(record)
        allocations.append(
            (Allocation(machine=record.id, entitlement=name), {f"{name}/seed/{k}": seed})
        )
    quota = Resources(cpu=10**9, memory_mib=held + TIGHT_ROOM_MIB)
    return Entitlement(name=name, quota=Quota(resources=quota)), machines, allocations


def capped_records(r: int) -> tuple[Entitlement, list[Machine], list[Held]]:
    """Entitlement capped<r>, allowed one std machine and owning none; one empty pool machine
    in each of its three datacenters."""
    machines = [
        machine(f"c{r}-{dc}", dc=f"dc{r}{dc}", msb=f"msb{r}{dc}", rack=f"r{r}{dc}")
        for dc in CAPPED_DCS
    ]
    allocations: list[Held] = [(Allocation(machine=record.id), {}) for record in machines]
    quota = Quota(resources=Resources(cpu=10**9, memory_mib=10**9), machines={"std": 1})
    return Entitlement(name=f"capped{r}", quota=quota), machines, allocations


def edge_steps(r: int) -> list[list[Job]]:
    """Round r's two steps, one job per replica each: tight<r>'s jobs (one size each), then
    capped<r>'s (one datacenter each)."""
    tight = [
        job(f"s{mib}", entitlement=f"tight{r}", count=1, memory=mib, cpu=100)
        for mib in QUOTA_EDGE_MIB
    ]
    capped = [
        job(
            f"in-{dc}",
            entitlement=f"capped{r}",
            count=1,
            cpu=100,
            placement=Placement(datacenters=[f"dc{r}{dc}"]),
        )
        for dc in CAPPED_DCS
    ]
    return [tight, capped]


@pytest.mark.timeout(60)
async def test_three_allocators_at_a_quota_edge_never_exceed_it_together(
    etcd_store: Store, etcd_server: EtcdServer, tmp_path: Path
) -> None:
    """Three replicas place, at the same moment, tasks of one entitlement on three different
    machines (or pull three different pool machines into it), where the quota admits any one
    of them but not all: every round must end within the quota, however the replicas race."""
    store = etcd_store
    entitlements: dict[str, Entitlement] = {}
    steps: list[list[Job]] = []
    for r in range(ROUNDS):
        for records in (tight_records(r), capped_records(r)):
            ent, machines, allocations = records
            entitlements[ent.name] = ent
            await store.put(keys.entitlement(ent.name), to_json(ent))
            for record, seeded in zip(machines, allocations, strict=True):
                await store.put(keys.machine(record.id), to_json(record))
                await put_allocation(store, *seeded)
        steps += edge_steps(r)
    for queued in (record for step in steps for record in step):
        await store.put(keys.job(queued.spec.entitlement, queued.spec.name), to_json(queued))

    ids = ["allocator-a", "allocator-b", "allocator-c"]
    responses: dict[str, pb.PlaceResponse] = {}
    async with replicas(store, etcd_server.url, tmp_path, ids) as addresses:
        channels = [grpc.aio.insecure_channel(address) for address in addresses]
        try:
            for channel in channels:
                await channel.channel_ready()
            stubs = [allocator_pb2_grpc.AllocatorStub(channel) for channel in channels]
            for step in steps:
                # Lock step: the three replicas get their request of the step together.
                answered = await asyncio.gather(
                    *(
                        stub.Place(
                            pb.PlaceRequest(
                                job_handle=record.handle, task_indexes=[0], job_generation=1
                            ),
                            timeout=30,
                        )
                        for stub, record in zip(stubs, step, strict=True)
                    )
                )
                responses |= {
                    record.handle: response for record, response in zip(step, answered, strict=True)
                }
        finally:
            for channel in channels:
                await channel.close(None)
    stored = await read_allocations(store)
    held: dict[str, list[str]] = {}
    for machine_id, allocation in stored.items():
        for task in allocation.tasks:
            if not job_of(task).endswith("/seed"):
                held.setdefault(job_of(task), []).append(machine_id)
    assert held == {
        handle: [p.machine_id for p in response.placements]
        for handle, response in responses.items()
        if response.placements
    }

    exceeded = []
    for name, ent in entitlements.items():
        owned = [a for a in stored.values() if owner_of(a) == name]
        usage = Resources()
        for allocation in owned:
            usage = usage + allocation.used()
        placed = sum(1 for handle in held if handle.startswith(f"{name}/"))
        assert placed >= 1, f"{name}: the quota admits one task, none was placed"
        if not usage.fits_in(ent.quota.resources):
            limit = ent.quota.resources.memory_mib
            exceeded.append(f"{name}: {placed} tasks placed, {usage.memory_mib} of {limit} MiB")
        if ent.quota.machines and len(owned) > ent.quota.machines["std"]:
            exceeded.append(f"{name}: {placed} tasks placed, owns {len(owned)} std machines of 1")
    conflicts = sum(response.conflicts for response in responses.values())
    print(f"{conflicts} conflicts; quotas exceeded: {exceeded}")
    assert not exceeded, "replicas racing at a quota's edge exceeded it:\n" + "\n".join(exceeded)
