"""An allocator replica in-process on a real store, called over real gRPC on loopback."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import grpc
import httpx
import pytest
from prometheus_client import REGISTRY

from tests.support.allocations import put_allocation, read_allocations
from tests.support.allocator_builders import REGION_MSBS, job, machine, put_job
from tests.support.metrics import scrape
from tests.support.waiting import eventually
from tether.allocator.engine import Engine
from tether.allocator.index import AllocationIndex
from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.metrics_server import WithMetrics
from tether.model import Allocation, AllocatorEndpoint, Resources, from_json, to_json
from tether.model.ephemeral import EphemeralResource, NodeSpec, ResourceGrant
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import EventType, Store, keys, open_store


def machines_of(response: pb.PlaceResponse | pb.SuggestResponse) -> dict[int, str]:
    return {p.task_index: p.machine_id for p in response.placements}


async def test_place_spreads_over_msbs_and_commits(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    response = await client.Place(
        pb.PlaceRequest(job_handle="ads/web", task_indexes=[0, 1, 2], job_generation=1)
    )
    placed = machines_of(response)
    assert sorted(placed) == [0, 1, 2]
    assert len(set(placed.values())) == 3, "one task per MSB"
    assert (response.attempts, response.conflicts, list(response.unplaced)) == (1, 0, [])

    stored = await read_allocations(region)
    for index, machine_id in placed.items():
        assert stored[machine_id].tasks[f"ads/web/{index}"] == Resources(cpu=500, memory_mib=1024)
    assert sum(len(a.tasks) for a in stored.values()) == 3

    # Again (a scheduler retry without request id): the same machines, nothing written.
    revision = await region.revision()
    again = await client.Place(
        pb.PlaceRequest(job_handle="ads/web", task_indexes=[2, 0, 1], job_generation=1)
    )
    assert [p.task_index for p in again.placements] == [2, 0, 1]
    assert machines_of(again) == placed
    assert (again.attempts, again.conflicts) == (0, 0)
    assert await region.revision() == revision


async def test_request_id_returns_the_first_response(
    client: allocator_pb2_grpc.AllocatorAsyncStub,
) -> None:
    request = pb.PlaceRequest(
        job_handle="ads/web", task_indexes=[0], job_generation=1, request_id="r-1"
    )
    first = await client.Place(request)
    assert first.attempts == 1
    released = await client.Release(pb.ReleaseRequest(job_handle="ads/web"))
    assert released.released == 1
    # The retry is answered from memory, not placed again.
    assert await client.Place(request) == first
    fresh = await client.Place(
        pb.PlaceRequest(job_handle="ads/web", task_indexes=[0], job_generation=1, request_id="r-2")
    )
    assert fresh.attempts == 1


async def test_over_capacity_tasks_are_unplaced_with_a_reason(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    await put_job(region, job("big", count=5, memory=3072))
    response = await client.Place(
        pb.PlaceRequest(job_handle="ads/big", task_indexes=range(5), job_generation=1)
    )
    assert len(set(machines_of(response).values())) == 4
    [unplaced] = response.unplaced
    assert unplaced.task_index == 4
    assert unplaced.reason == (
        "no machine fits: 4 of 4 machines: insufficient memory "
        "(need 3072 MiB, best has 1024 MiB free)"
    )
    # Nothing fits at all: no transaction is tried.
    await put_job(region, job("huge", count=1, memory=8192))
    huge = await client.Place(
        pb.PlaceRequest(job_handle="ads/huge", task_indexes=[0], job_generation=1)
    )
    assert "insufficient memory" in huge.unplaced[0].reason
    assert (huge.attempts, list(huge.placements)) == (0, [])


async def test_release_empties_the_records_and_is_idempotent(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    await client.Place(
        pb.PlaceRequest(job_handle="ads/web", task_indexes=[0, 1, 2], job_generation=1)
    )
    one = await client.Release(pb.ReleaseRequest(job_handle="ads/web", task_indexes=[1, 7]))
    assert one.released == 1
    stored = await read_allocations(region)
    assert sorted(t for a in stored.values() for t in a.tasks) == ["ads/web/0", "ads/web/2"]

    rest = await client.Release(pb.ReleaseRequest(job_handle="ads/web"))
    assert rest.released == 2
    assert all(not a.tasks for a in (await read_allocations(region)).values())
    assert (await client.Release(pb.ReleaseRequest(job_handle="ads/web"))).released == 0


async def test_a_release_for_another_entitlement_returns_emptied_machines_at_once(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    placed = machines_of(
        await client.Place(
            pb.PlaceRequest(job_handle="ads/web", task_indexes=[0, 1], job_generation=1)
        )
    )
    # A plain release leaves the machine in the entitlement, idle; one whose tasks were
    # preempted for another entitlement hands it back to the free pool.
    await client.Release(pb.ReleaseRequest(job_handle="ads/web", task_indexes=[0]))
    await client.Release(
        pb.ReleaseRequest(job_handle="ads/web", task_indexes=[1], return_emptied_machines=True)
    )
    stored = await read_allocations(region)
    kept, returned = stored[placed[0]].record, stored[placed[1]].record
    assert kept is not None
    assert returned is not None
    assert (kept.entitlement, kept.idle_since is not None) == ("ads", True)
    assert (returned.entitlement, returned.idle_since) == (None, None)


async def test_errors_have_their_status_codes(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    async def code_of(request: pb.PlaceRequest) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await client.Place(request)
        return failure.value.code(), failure.value.details() or ""

    code, message = await code_of(
        pb.PlaceRequest(job_handle="ads/web", task_indexes=[0], job_generation=2)
    )
    assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert message == (
        "job ads/web is at generation 1 in the store, but the request is for generation 2"
    )

    code, message = await code_of(pb.PlaceRequest(job_handle="ads/nope", task_indexes=[0]))
    assert (code, message) == (grpc.StatusCode.NOT_FOUND, "job ads/nope not found")

    code, message = await code_of(pb.PlaceRequest(job_handle="not a handle", task_indexes=[0]))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "invalid job handle" in message

    code, message = await code_of(
        pb.PlaceRequest(job_handle="ads/web", task_indexes=[1, 3], job_generation=1)
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert message == "task indexes 3 are out of range: job ads/web has 3 tasks (0 to 2)"

    code, _ = await code_of(
        pb.PlaceRequest(job_handle="ads/web", task_indexes=[1, 1], job_generation=1)
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT

    await put_job(region, job("gone", deleting=True))
    code, message = await code_of(
        pb.PlaceRequest(job_handle="ads/gone", task_indexes=[0], job_generation=1)
    )
    assert (code, message) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "job ads/gone is being deleted; its tasks are not placed",
    )

    await put_job(region, job("orphan", entitlement="nobody"))
    code, message = await code_of(
        pb.PlaceRequest(job_handle="nobody/orphan", task_indexes=[0], job_generation=1)
    )
    assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert "entitlement nobody" in message

    await region.put(keys.job("ads", "broken"), b"{}")
    code, message = await code_of(
        pb.PlaceRequest(job_handle="ads/broken", task_indexes=[0], job_generation=1)
    )
    assert code is grpc.StatusCode.INTERNAL
    assert message.startswith("the record of job ads/broken is not valid: spec: Field required;")

    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await client.Explain(pb.ExplainRequest(job_handle="ads/nope"))
    assert failure.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await client.Release(pb.ReleaseRequest(job_handle="/"))
    assert failure.value.code() is grpc.StatusCode.INVALID_ARGUMENT


async def test_explain(region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub) -> None:
    await client.Place(pb.PlaceRequest(job_handle="ads/web", task_indexes=[0], job_generation=1))
    explained = await client.Explain(pb.ExplainRequest(job_handle="ads/web"))
    assert explained.job_handle == "ads/web"
    assert explained.machines_considered == REGION_MSBS
    [chosen] = explained.chosen_machines
    assert list(chosen.task_indexes) == [0]
    assert chosen.rank >= 1, "its machine still has room for another task"
    assert explained.summary == "4 of 4 machines fit"
    assert (explained.machines_fitting, explained.entitlement_machines) == (4, 1)

    await put_job(region, job("big", memory=6000))
    big = await client.Explain(pb.ExplainRequest(job_handle="ads/big"))
    assert big.summary == "4 of 4 machines: insufficient memory"
    memory = next(rule for rule in big.rules if rule.rule == "resources.memory")
    assert memory.machines_rejected == 4
    assert memory.detail == "need 6000 MiB, best has 4096 MiB free"
    assert list(big.chosen_machines) == []


async def test_follows_the_store(
    region: Store, allocator: Allocator, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    # Another writer fills m0..m3 to the brim; a new machine appears without a record.
    for n in range(REGION_MSBS):
        filler = {f"ml/filler/{n}": Resources(memory_mib=4096)}
        await put_allocation(region, Allocation(machine=f"m{n}"), filler)
    await region.put(keys.machine("m9"), to_json(machine("m9", msb="msb9")))

    async def usage() -> int:
        memory = allocator.index.dimension_of["memory"]
        return int(allocator.index.usage_of("ml")[memory])

    async def m9() -> int | None:
        return allocator.index.row_of.get("m9")

    await eventually(usage, lambda used: used == 4 * 4096, timeout_s=10, what="the fillers' usage")
    await eventually(m9, lambda found: found is not None, timeout_s=10, what="machine m9")

    response = await client.Place(
        pb.PlaceRequest(job_handle="ads/web", task_indexes=[0, 1], job_generation=1)
    )
    assert machines_of(response) == {0: "m9", 1: "m9"}
    # The record did not exist: the allocator created it.
    created = (await read_allocations(region))["m9"]
    assert created.record is not None
    assert set(created.tasks) == {"ads/web/0", "ads/web/1"}


async def stale_engine(region: Store) -> tuple[Engine, list[int]]:
    """An engine over an index filled once and updated only when the engine waits for its
    feed after a conflict (the revisions it waited for are listed), so another writer's
    change surprises it."""
    index = AllocationIndex()
    for kv in (await region.range(keys.MACHINES)).kvs:
        index.set_machine(keys.last_segment(kv.key), kv.value)
    index.set_allocations((await region.range(keys.ALLOCATIONS)).kvs)
    ads = await region.get(keys.entitlement("ads"))
    index.set_entitlement("ads", ads.value if ads else None)

    async def read_resources() -> None:
        for kv in (await region.range(keys.EPHEMERAL_RESOURCES)).kvs:
            name = kv.key[len(keys.EPHEMERAL_RESOURCES) :]
            index.set_ephemeral(name, kv.value, kv.mod_revision)

    await read_resources()
    waits: list[int] = []

    async def caught_up(revision: int) -> None:
        # Stands in for the allocation feed: the index learns the store's records only now.
        waits.append(revision)
        for kv in (await region.range(keys.ALLOCATIONS)).kvs:
            index.set_allocation(kv.key[len(keys.ALLOCATIONS) :], kv, kv.mod_revision)

    async def resources_caught_up(revision: int) -> None:
        waits.append(-revision)
        await read_resources()

    engine = Engine(
        region,
        index,
        max_attempts=10,
        idle_return_s=300,
        writer="test",
        caught_up=caught_up,
        resources_caught_up=resources_caught_up,
    )
    return engine, waits


async def test_a_conflict_refreshes_and_retries(region: Store) -> None:
    engine, waits = await stale_engine(region)

    # m0 is the first choice for one task (all tie, then the id); someone else takes 3.5 GiB.
    await put_allocation(
        region, Allocation(machine="m0"), {"ml/filler/0": Resources(memory_mib=3584)}
    )
    filled = await region.revision()
    placed = await engine.place("ads/web", [0], 1, "")
    assert (placed.attempts, placed.conflicts) == (2, 1)
    assert waits == [filled], "one wait, for the revision the conflict saw"
    assert placed.placements == [(0, "m1")]
    stored = await read_allocations(region)
    assert set(stored["m0"].tasks) == {"ml/filler/0"}
    assert set(stored["m1"].tasks) == {"ads/web/0"}


async def test_an_ephemeral_resource_lowered_under_a_plan_fails_its_commit(
    region: Store,
) -> None:
    now = datetime.now(UTC)
    slot = EphemeralResource(
        entitlement="ads",
        label="slot",
        grants=[ResourceGrant(node_spec=NodeSpec(machine="m0"), capacity=1)],
        created_at=now,
        updated_at=now,
    )
    await region.put(keys.ephemeral_resource("ads", "slot"), to_json(slot))
    await put_job(region, job("pinned", count=1, memory=256, extra={"slot": 1}))
    engine, waits = await stale_engine(region)

    # A member takes the label off m0 after the engine read it.
    gone = slot.model_copy(update={"grants": [slot.grants[0].model_copy(update={"capacity": 0})]})
    await region.put(keys.ephemeral_resource("ads", "slot"), to_json(gone))
    lowered = await region.revision()
    placed = await engine.place("ads/pinned", [0], 1, "")
    assert (placed.attempts, placed.conflicts) == (1, 1)
    assert -lowered in waits, "the engine waited for the resource as the conflict read it"
    assert placed.placements == []
    assert "insufficient ephemeral resource slot" in placed.unplaced[0][1]
    assert all(
        "ads/pinned/0" not in held.tasks for held in (await read_allocations(region)).values()
    )


async def test_registration_follows_the_lease(region: Store, allocator: Allocator) -> None:
    key = keys.allocator("allocator-1")
    kv = await region.get(key)
    assert kv is not None
    endpoint = from_json(AllocatorEndpoint, kv.value, stored=True)
    assert endpoint.address == allocator.address
    assert endpoint.since <= datetime.now(UTC)

    # The lease is lost (revoked behind the replica's back): the key goes with it at once, and
    # the replica registers again on a new lease (perhaps before the key could be read).
    async with region.watch(key, start_revision=kv.mod_revision + 1) as watch:
        await region.lease_revoke(kv.lease)
        first = await asyncio.wait_for(anext(watch), 10)
    assert [(event.type, event.kv.key) for event in first] == [(EventType.DELETE, key)]
    again = await eventually(
        lambda: region.get(key),
        lambda found: found is not None,
        timeout_s=10,
        what="the new registration",
    )
    assert again is not None
    assert again.lease != kv.lease

    await allocator.stop()
    assert await region.get(key) is None


async def test_only_the_request_whose_machine_changed_counts_a_conflict(region: Store) -> None:
    # Two jobs committed in one transaction: whichever is planned first takes m0 (web 1 GiB,
    # api 3.5 GiB); the other no longer fits there and goes elsewhere. Someone else fills m0
    # first.
    await put_job(region, job("api", count=1, memory=3584))
    engine, _ = await stale_engine(region)
    await put_allocation(
        region, Allocation(machine="m0"), {"ml/filler/0": Resources(memory_mib=3584)}
    )
    # While commits wait for the engine's write lock, both requests queue for one batch.
    async with engine._writing:
        web_call = asyncio.create_task(engine.place("ads/web", [0], 1, ""))
        api_call = asyncio.create_task(engine.place("ads/api", [0], 1, ""))
        await eventually(
            lambda: engine.stats.places,
            lambda places: places == 2,
            timeout_s=5,
            what="both requests queued",
        )
    web, api = await web_call, await api_call
    # Both were sent twice (the transaction failed), but only the one planned on m0 had its
    # machine changed: the other kept its machine and did not conflict.
    assert (web.attempts, api.attempts) == (2, 2)
    assert sorted([web.conflicts, api.conflicts]) == [0, 1]
    assert "m0" not in {web.placements[0][1], api.placements[0][1]}
    stored = await read_allocations(region)
    assert set(stored["m0"].tasks) == {"ml/filler/0"}


async def test_the_metrics_port_shows_placements_and_store_transactions(
    region: Store, store_url: str
) -> None:
    txn = {"backend": "etcd" if store_url.startswith("etcd") else "sqlite", "operation": "txn"}
    await put_job(region, job("big", count=5, memory=3072))
    allocator = Allocator(open_store(store_url), AllocatorSettings(id="allocator-m", lease_ttl_s=3))
    replica = WithMetrics(allocator, 0)
    await replica.start()
    try:
        before = await scrape(replica.metrics.url)
        async with grpc.aio.insecure_channel(allocator.address) as channel:
            response = await allocator_pb2_grpc.AllocatorStub(channel).Place(
                pb.PlaceRequest(job_handle="ads/big", task_indexes=range(5), job_generation=1)
            )
        assert (len(response.placements), len(response.unplaced)) == (4, 1)
        after = await scrape(replica.metrics.url)
    finally:
        await replica.stop()
    placements = "tether_allocator_placements_total"
    for outcome, count in (("placed", 4), ("unplaced", 1)):
        assert after.value(placements, outcome=outcome) == (
            before.value(placements, outcome=outcome) + count
        )
    # The placements were committed in a store transaction.
    assert after.value("tether_store_request_duration_seconds_count", **txn) > before.value(
        "tether_store_request_duration_seconds_count", **txn
    )
    with pytest.raises(httpx.ConnectError):
        await scrape(replica.metrics.url)


async def test_a_conflict_counts_in_the_conflict_metric(region: Store) -> None:
    engine, _ = await stale_engine(region)
    labels = {"operation": "place"}
    before = REGISTRY.get_sample_value("tether_allocator_commit_conflicts_total", labels) or 0.0
    await put_allocation(
        region, Allocation(machine="m0"), {"ml/filler/0": Resources(memory_mib=3584)}
    )
    placed = await engine.place("ads/web", [0], 1, "")
    assert placed.conflicts == 1
    assert REGISTRY.get_sample_value("tether_allocator_commit_conflicts_total", labels) == (
        before + 1
    )


async def test_expired_ephemeral_resources_are_deleted(region: Store, allocator: Allocator) -> None:
    now = datetime.now(UTC)

    def resource(label: str, expires_at: datetime) -> EphemeralResource:
        grant = ResourceGrant(node_spec=NodeSpec(), capacity=1)
        return EphemeralResource(
            entitlement="ads",
            label=label,
            grants=[grant],
            expires_at=expires_at,
            created_at=now,
            updated_at=now,
        )

    await region.put(
        keys.ephemeral_resource("ads", "old"), to_json(resource("old", now - timedelta(seconds=1)))
    )
    await region.put(
        keys.ephemeral_resource("ads", "new"), to_json(resource("new", now + timedelta(hours=1)))
    )
    await eventually(
        lambda: region.get(keys.ephemeral_resource("ads", "old")),
        lambda found: found is None,
        timeout_s=10,
        what="the expired resource deleted",
    )
    # The tidy pass that deleted it passed over the other: still there.
    assert await region.get(keys.ephemeral_resource("ads", "new")) is not None
