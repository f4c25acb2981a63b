"""GET /v1/jobs/{ent}/{job}/placement: explanations from real allocator replicas over gRPC."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import grpc
import pytest

from tests.integration.frontend.conftest import (
    ADMIN,
    ALICE,
    Region,
    job_spec,
    seed_region,
    serving,
)
from tests.integration.frontend.problems import assert_problem
from tests.support.machines import make_machine
from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.frontend.settings import FrontendSettings
from tether.model import Allocation, AllocatorEndpoint, Resources, Topology, to_json
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import Store, keys, open_store

MACHINES = 4
MACHINE_MEMORY_MIB = 4096


@pytest.fixture
async def machines(store: Store) -> list[str]:
    """Four up machines of 4 CPUs and 4 GiB, one per MSB, in the free pool (empty allocations,
    as the broker creates them)."""
    ids = [f"m{n}" for n in range(MACHINES)]
    for n, machine_id in enumerate(ids):
        machine = make_machine(
            machine_id,
            topology=Topology(region="r1", dc="dc1", msb=f"msb{n}", rack=f"rack{n}"),
            capacity=Resources(cpu=4000, memory_mib=MACHINE_MEMORY_MIB, disk_gib=100),
        )
        await store.put(keys.machine(machine_id), to_json(machine))
        await store.put(keys.allocation(machine_id), to_json(Allocation(machine=machine_id)))
    return ids


@asynccontextmanager
async def allocator(store_url: str) -> AsyncIterator[Allocator]:
    """A real allocator replica on its own store connection, registered under allocators/."""
    replica = Allocator(open_store(store_url), AllocatorSettings(id="allocator-1", port=0))
    await replica.start()
    try:
        yield replica
    finally:
        await replica.stop()


async def submit(
    region: Region, name: str, *, count: int = 1, memory_mib: int = 512, entitlement: str = "team-a"
) -> str:
    """Submits a job as the admin; returns its handle."""
    spec = job_spec(name, count=count, cpu=100, entitlement=entitlement)
    spec["task"]["resources"]["memory_mib"] = memory_mib
    response = await region.api.post("/v1/jobs", json=spec, headers=ADMIN)
    assert response.status_code == 201, response.text
    return f"{entitlement}/{name}"


def rejected_by(body: dict[str, Any]) -> dict[str, int]:
    return {rule["rule"]: rule["machines_rejected"] for rule in body["rules"]}


async def test_a_job_too_large_for_every_machine_is_explained_by_its_memory_rule(
    region: Region, machines: list[str], store_url: str
) -> None:
    # 6 GiB: within team-a's 8 GiB quota, larger than every 4 GiB machine.
    await submit(region, "big", memory_mib=6144)
    async with allocator(store_url):
        response = await region.api.get("/v1/jobs/team-a/big/placement", headers=ALICE)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["job"] == "team-a/big"
    assert body["machines_considered"] == MACHINES
    assert body["machines_fitting"] == 0
    assert rejected_by(body)["resources.memory"] == MACHINES
    # Each rule counts only machines the earlier rules let through, so the counts add up.
    assert sum(rejected_by(body).values()) == MACHINES
    assert "memory" in body["summary"]
    assert (body["chosen"], body["entitlement_machines"]) == ([], 0)


async def test_the_machines_holding_a_job_are_listed_with_their_rank(
    region: Region, machines: list[str], store_url: str
) -> None:
    await submit(region, "web", count=2)
    async with (
        allocator(store_url) as replica,
        grpc.aio.insecure_channel(replica.address) as channel,
    ):
        placed = await allocator_pb2_grpc.AllocatorStub(channel).Place(
            pb.PlaceRequest(job_handle="team-a/web", task_indexes=[0, 1], job_generation=1)
        )
        where = {p.task_index: p.machine_id for p in placed.placements}
        assert sorted(where) == [0, 1], placed
        response = await region.api.get("/v1/jobs/team-a/web/placement", headers=ALICE)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["machines_considered"] == MACHINES
    # 0.1 CPU and 512 MiB of 4 CPUs and 4 GiB: every machine could take one more task.
    assert body["machines_fitting"] == MACHINES
    assert sum(rejected_by(body).values()) == 0
    holding = {chosen["machine"]: chosen for chosen in body["chosen"]}
    assert {index: m for m, chosen in holding.items() for index in chosen["tasks"]} == where
    assert sorted(holding) == [chosen["machine"] for chosen in body["chosen"]]
    ranks = sorted(chosen["rank"] for chosen in body["chosen"])
    # Both could take one more task, each at its own place in the order.
    assert ranks[0] >= 1, ranks
    assert len(set(ranks)) == len(ranks), ranks
    assert body["entitlement_machines"] >= len(holding)


async def test_jobs_a_principal_cannot_see_are_not_explained(region: Region) -> None:
    await submit(region, "secret", entitlement="team-b")
    unknown = await region.api.get("/v1/jobs/team-a/nope/placement", headers=ALICE)
    assert_problem(unknown, 404, "job 'team-a/nope' does not exist")
    # team-b's job under alice's entitlement is a job team-a does not have.
    elsewhere = await region.api.get("/v1/jobs/team-a/secret/placement", headers=ALICE)
    assert_problem(elsewhere, 404, "job 'team-a/secret' does not exist")
    # Asked for by its own handle: refused as every job route refuses non-members.
    outsider = await region.api.get("/v1/jobs/team-b/secret/placement", headers=ALICE)
    assert_problem(outsider, 403, "'alice' is not a member of entitlement 'team-b'")
    missing = await region.api.get("/v1/jobs/nope/web/placement", headers=ALICE)
    assert_problem(missing, 404, "entitlement 'nope' does not exist")
    anonymous = await region.api.get("/v1/jobs/team-b/secret/placement")
    assert_problem(anonymous, 401)


async def test_without_an_allocator_the_answer_is_503_with_retry_after(region: Region) -> None:
    await submit(region, "web")
    response = await region.api.get("/v1/jobs/team-a/web/placement", headers=ALICE)
    problem = assert_problem(response, 503, "no allocator is registered")
    assert response.headers["Retry-After"] == "1"
    assert problem["type"] == "urn:tether:problem:unavailable"


class FakeAllocator(allocator_pb2_grpc.AllocatorServicer):
    """Answers Explain after `delay_s` with EXPLAINED, or with the error its job's name asks
    for (`refuse-not-found` aborts with NOT_FOUND)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls = 0

    async def Explain(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.ExplainRequest,
        context: grpc.aio.ServicerContext[pb.ExplainRequest, pb.ExplainResponse],
    ) -> pb.ExplainResponse:
        self.calls += 1
        await asyncio.sleep(self.delay_s)
        _, name = request.job_handle.split("/")
        if name.startswith("refuse-"):
            code = grpc.StatusCode[name.removeprefix("refuse-").replace("-", "_").upper()]
            await context.abort(code, f"{request.job_handle}: refused with {code.name}")
        return EXPLAINED

    async def Place(  # noqa: N802
        self, request: pb.PlaceRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.PlaceResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the frontend never places")
        raise AssertionError("abort returns only by raising")

    async def Release(  # noqa: N802
        self, request: pb.ReleaseRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.ReleaseResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the frontend never releases")
        raise AssertionError("abort returns only by raising")

    async def CheckPreemption(  # noqa: N802
        self,
        request: pb.CheckPreemptionRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> pb.CheckPreemptionResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the frontend never preempts")
        raise AssertionError("abort returns only by raising")

    async def EphemeralState(  # noqa: N802
        self,
        request: pb.EphemeralStateRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> pb.EphemeralStateResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "these tests explain only")
        raise AssertionError("abort returns only by raising")

    async def Suggest(  # noqa: N802
        self, request: pb.SuggestRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> pb.SuggestResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the frontend never asks")
        raise AssertionError("abort returns only by raising")


EXPLAINED = pb.ExplainResponse(
    job_handle="team-a/web",
    machines_considered=5,
    machines_fitting=2,
    entitlement_machines=3,
    summary="2 of 5 machines fit",
    rules=[
        pb.RuleResult(rule="state up", machines_rejected=1),
        pb.RuleResult(rule="resources.memory", machines_rejected=2, detail="closest: 256 MiB"),
    ],
    preferences=[pb.PreferenceResult(rule="os == linux", weight=1, machines_matching=2)],
    chosen_machines=[
        pb.ChosenMachine(machine_id="m9", task_indexes=[3], rank=0),
        pb.ChosenMachine(machine_id="m1", task_indexes=[2, 0], rank=1, preferences=["os == linux"]),
    ],
)


@asynccontextmanager
async def fake_replica(
    store: Store, replica_id: str, servicer: FakeAllocator
) -> AsyncIterator[None]:
    """Serves `servicer` on loopback, registered as `replica_id`, until the block ends."""
    server = grpc.aio.server()
    allocator_pb2_grpc.add_AllocatorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        await register(store, replica_id, f"127.0.0.1:{port}")
        yield
    finally:
        await server.stop(None)


async def register(store: Store, replica_id: str, address: str) -> None:
    endpoint = AllocatorEndpoint(
        id=replica_id, address=address, pid=os.getpid(), since=datetime.now(UTC)
    )
    await store.put(keys.allocator(replica_id), to_json(endpoint))


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_allocator_errors_become_problems_with_its_message(region: Region) -> None:
    async with fake_replica(region.store, "allocator-1", FakeAllocator()):
        for code, status in (
            ("not-found", 404),
            ("invalid-argument", 400),
            ("failed-precondition", 409),
            ("internal", 502),
            ("permission-denied", 502),
        ):
            await submit(region, f"refuse-{code}")
            response = await region.api.get(
                f"/v1/jobs/team-a/refuse-{code}/placement", headers=ALICE
            )
            name = code.replace("-", "_").upper()
            assert_problem(response, status, f"team-a/refuse-{code}: refused with {name}")


async def test_dead_and_slow_replicas_are_skipped(store: Store, store_url: str) -> None:
    await seed_region(store)
    # A deadline a healthy replica meets even on a loaded machine (0.3 s was missed once when
    # the suite's other worker ran a region), and a slow one well beyond it.
    settings = FrontendSettings(host="127.0.0.1", port=0, allocator_timeout_s=1.5)
    slow, good = FakeAllocator(delay_s=4), FakeAllocator()
    async with serving(store_url, settings) as api, fake_replica(store, "allocator-b", slow):
        region = Region(store, api)
        await submit(region, "web")
        await register(store, "allocator-a", f"127.0.0.1:{closed_port()}")
        # Replicas are tried in id order: a refuses connections, b answers too late.
        failed = await api.get("/v1/jobs/team-a/web/placement", headers=ALICE)
        assert_problem(failed, 503, "allocator-a: UNAVAILABLE", "allocator-b: DEADLINE_EXCEEDED")
        async with fake_replica(store, "allocator-c", good):
            response = await api.get("/v1/jobs/team-a/web/placement", headers=ALICE)
            assert response.status_code == 200, response.text
            # A replica that left is not tried again.
            await store.delete(keys.allocator("allocator-b"))
            again = await api.get("/v1/jobs/team-a/web/placement", headers=ALICE)
            assert again.json() == response.json()
    assert (slow.calls, good.calls) == (2, 2)
    assert response.json() == {
        "job": "team-a/web",
        "summary": "2 of 5 machines fit",
        "machines_considered": 5,
        "machines_fitting": 2,
        "entitlement_machines": 3,
        "rules": [
            {"rule": "state up", "machines_rejected": 1, "detail": ""},
            {"rule": "resources.memory", "machines_rejected": 2, "detail": "closest: 256 MiB"},
        ],
        "preferences": [{"rule": "os == linux", "weight": 1, "machines_matching": 2}],
        "chosen": [
            {"machine": "m1", "tasks": [0, 2], "rank": 1, "preferences": ["os == linux"]},
            {"machine": "m9", "tasks": [3], "rank": 0, "preferences": []},
        ],
    }
