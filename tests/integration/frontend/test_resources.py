"""/v1/resources over real HTTP with a real allocator replica: members set, read and delete
their entitlement's ephemeral resources; the cluster state is what the allocator counts; bad
input and strangers change nothing; a lowering under running tasks is refused naming them."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tests.integration.frontend.conftest import ADMIN, ALICE, MALLORY, Region
from tests.integration.frontend.problems import assert_problem
from tests.support.allocator_builders import job, machine, put_job
from tests.support.waiting import eventually
from tether.allocator.service import Allocator
from tether.model import from_json, to_json
from tether.model.ephemeral import EphemeralResource
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import Store, keys


@pytest.fixture
async def machines(region: Region) -> None:
    for n in range(3):
        await region.store.put(keys.machine(f"m{n}"), to_json(machine(f"m{n}", msb=f"msb{n}")))


def set_body(capacity: int, **extra: Any) -> dict[str, Any]:
    return {"entitlement": "team-a", "label": "slot", "capacity": capacity} | extra


async def state(region: Region, headers: dict[str, str] = ALICE, **params: Any) -> Any:
    response = await region.api.get("/v1/resources", headers=headers, params=params)
    assert response.status_code == 200, response.text
    return response.json()["resources"]


async def test_members_set_read_and_delete_labels(region: Region, allocator: Allocator) -> None:
    api = region.api
    first = await api.post(
        "/v1/resources", headers=ALICE, json=set_body(2, node_spec={"machine": "m1"})
    )
    assert first.status_code == 200, first.text
    assert first.json()["grants"] == [
        {"node_spec": {"machine": "m1", "constraints": []}, "capacity": 2}
    ]
    kv = await region.store.get(keys.ephemeral_resource("team-a", "slot"))
    assert kv is not None
    assert from_json(EphemeralResource, kv.value, stored=True).machine_grants() == {"m1": 2}
    # A second machine joins the label; an expiry ends it later.
    second = await api.post(
        "/v1/resources",
        headers=ALICE,
        json=set_body(1, node_spec={"machine": "m2"}, ttl_s=3600),
    )
    assert second.json()["expires_at"] is not None

    listed = await state(region, entitlement="team-a")
    assert [(r["resource"]["label"], r["machines"]) for r in listed] == [
        (
            "slot",
            [
                {"machine": "m1", "capacity": 2, "held": 0, "free": 2},
                {"machine": "m2", "capacity": 1, "held": 0, "free": 1},
            ],
        )
    ]
    one = await api.get("/v1/resources/team-a/slot", headers=ALICE, params={"limit": 1})
    assert one.json()["machines"] == [{"machine": "m1", "capacity": 2, "held": 0, "free": 2}]
    assert one.json()["machines_truncated"] is True

    # Labels are the entitlement's: another team sees none and cannot touch them.
    assert await state(region, MALLORY) == []
    assert len(await state(region, ADMIN)) == 1
    assert_problem(await api.get("/v1/resources/team-a/slot", headers=MALLORY), 403)
    assert_problem(await api.post("/v1/resources", headers=MALLORY, json=set_body(5)), 403)
    assert_problem(await api.delete("/v1/resources/team-a/slot", headers=MALLORY), 403)

    deleted = await api.delete("/v1/resources/team-a/slot", headers=ALICE)
    assert deleted.status_code == 200, deleted.text
    assert_problem(await api.get("/v1/resources/team-a/slot", headers=ALICE), 404)
    assert await state(region) == []


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        (set_body(-1), 422, "capacity"),
        (set_body(1, node_spec={"machine": "nowhere"}), 422, "unknown machine 'nowhere'"),
        (set_body(1) | {"label": "gpus"}, 422, "built-in resource dimension"),
        (set_body(1, owner_job="ghost"), 422, "job 'team-a/ghost' does not exist"),
        (
            set_body(
                1, node_spec={"machine": "m1", "constraints": [{"attribute": "a", "op": "exists"}]}
            ),
            422,
            "not both",
        ),
        (set_body(1, ttl_s=0), 422, "ttl_s"),
        # An expiry past any date (found by the API property pass: it was a 500).
        (set_body(1, ttl_s=5e307), 422, "ttl_s"),
        (set_body(1) | {"entitlement": "nobody"}, 404, "nobody"),
    ],
)
async def test_bad_input_changes_nothing(
    region: Region, allocator: Allocator, body: dict[str, Any], status: int, detail: str
) -> None:
    before = await region.store.revision()
    assert_problem(await region.api.post("/v1/resources", headers=ADMIN, json=body), status, detail)
    assert await region.store.revision() == before


async def place(allocator: Allocator, job_name: str) -> pb.PlaceResponse:
    async with grpc.aio.insecure_channel(allocator.address) as channel:
        stub = allocator_pb2_grpc.AllocatorStub(channel)
        return await stub.Place(
            pb.PlaceRequest(job_handle=f"team-a/{job_name}", task_indexes=[0, 1], job_generation=1)
        )


async def test_lowering_under_running_tasks_is_refused_naming_them(
    region: Region, allocator: Allocator
) -> None:
    api = region.api
    store: Store = region.store
    grown = await api.post(
        "/v1/resources", headers=ALICE, json=set_body(2, node_spec={"machine": "m1"})
    )
    assert grown.status_code == 200, grown.text
    await put_job(
        store, job("pair", entitlement="team-a", count=2, memory=256, cpu=100, extra={"slot": 1})
    )

    async def placed() -> pb.PlaceResponse:
        return await place(allocator, "pair")

    # The replica's feed may not hold the label yet: placing waits for it.
    response = await eventually(
        placed, lambda answer: len(answer.placements) == 2, timeout_s=10, what="the pair placed"
    )
    assert {p.machine_id for p in response.placements} == {"m1"}
    before = await store.revision()
    refused = await api.post(
        "/v1/resources", headers=ALICE, json=set_body(1, node_spec={"machine": "m1"})
    )
    assert_problem(refused, 409, "m1: capacity 1, held 2 by team-a/pair/0, team-a/pair/1")
    assert await store.revision() == before
    listed = await state(region, entitlement="team-a")
    assert listed[0]["machines"] == [{"machine": "m1", "capacity": 2, "held": 2, "free": 0}]
    # Raising is never refused; neither is deleting (the tasks keep what they hold).
    assert (
        await api.post(
            "/v1/resources", headers=ALICE, json=set_body(3, node_spec={"machine": "m1"})
        )
    ).is_success
    assert (await api.delete("/v1/resources/team-a/slot", headers=ALICE)).is_success
