"""Submitting into a full entitlement over real HTTP: batch jobs queue with their position, a
job that could never fit and a service that cannot start now are refused, bad fields are 422;
entitlement trees are checked when an entitlement is created. No scheduler runs here, so
nothing is admitted: every job stays queued."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.integration.frontend.conftest import (
    ADMIN,
    ALICE,
    MALLORY,
    SHARDS,
    Region,
    job_spec,
    lead,
)
from tests.integration.frontend.problems import assert_problem
from tests.support.waiting import eventually
from tether.model import Job, Resources, from_json, to_json
from tether.model.admission import Admission, AdmissionState, EntitlementUse, QueueStatus
from tether.store import keys


def batch(name: str, count: int = 2, **fields: Any) -> dict[str, Any]:
    return job_spec(name, count=count) | {"kind": "batch"} | fields


async def test_batch_jobs_over_quota_queue_in_order_with_their_position(region: Region) -> None:
    api = region.api
    # team-a's quota is 4000 millicores; each task takes 1000.
    for name in ("first", "second"):
        created = await api.post("/v1/jobs", headers=ALICE, json=batch(name, 3))
        assert created.status_code == 201, created.text
        assert created.json()["admission"]["state"] == "queued"
    urgent = await api.post("/v1/jobs", headers=ALICE, json=batch("urgent", 1, priority=500))
    assert urgent.status_code == 201, urgent.text
    positions = {}
    for name in ("first", "second", "urgent"):
        view = (await api.get(f"/v1/jobs/team-a/{name}", headers=ALICE)).json()
        positions[name] = view["queue_position"]
        assert view["admission"]["history"][0]["kind"] == "queued"
    assert positions == {"urgent": 1, "first": 2, "second": 3}
    kv = await region.store.get(keys.admission("team-a", "second"))
    assert kv is not None
    stored = from_json(Admission, kv.value, stored=True)
    assert (stored.state, stored.tasks, stored.least_tasks) == (AdmissionState.QUEUED, 3, 3)
    # The job says so: a scheduler that sees it before its record runs none of its tasks.
    job_kv = await region.store.get(keys.job("team-a", "second"))
    assert job_kv is not None
    assert from_json(Job, job_kv.value, stored=True).has_admission
    listed = (await api.get("/v1/jobs?entitlement=team-a", headers=ALICE)).json()["jobs"]
    assert {job["admission"]["state"] for job in listed} == {"queued"}
    # A service queues only when it says so.
    service = await api.post("/v1/jobs", headers=ALICE, json=job_spec("web", count=1))
    assert_problem(service, 409, "job 'team-a/second' waits ahead", "on_full: queue")
    waits = job_spec("web", count=1) | {"on_full": "queue"}
    assert (await api.post("/v1/jobs", headers=ALICE, json=waits)).status_code == 201


async def test_a_job_that_could_never_fit_is_refused_and_nothing_is_written(
    region: Region,
) -> None:
    revision = await region.store.revision()
    huge = await region.api.post("/v1/jobs", headers=ALICE, json=batch("huge", 5))
    assert_problem(huge, 409, "could never be admitted", "cpu: need 5000 millicores, 4000 free")
    gpus = batch("gpu") | {"task": job_spec()["task"] | {"resources": {"cpu": 1, "gpus": 1}}}
    assert_problem(
        await region.api.post("/v1/jobs", headers=ALICE, json=gpus), 409, "gpus: need 2, 0 free"
    )
    assert await region.store.revision() == revision


async def test_elastic_deadline_and_duration_fields_are_checked(region: Region) -> None:
    api = region.api
    revision = await region.store.revision()
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    for body, loc, fragment in (
        (batch("late", deadline=past), "deadline", "is in the past"),
        (batch("wide", 2, min_count=3), "min_count", "must be at most count (2)"),
        (job_spec("svc") | {"expected_duration_s": 60}, "expected_duration_s", "only batch"),
        (job_spec("svc") | {"min_count": 1}, "min_count", "only batch"),
    ):
        problem = assert_problem(await api.post("/v1/jobs", headers=ALICE, json=body), 422)
        [error] = problem["errors"]
        assert error["loc"] == [loc]
        assert fragment in error["msg"]
    assert await region.store.revision() == revision
    # An elastic job asks only for its minimum to be possible.
    elastic = batch("elastic", 8, min_count=2)
    assert (await api.post("/v1/jobs", headers=ALICE, json=elastic)).status_code == 201


async def test_entitlement_trees_are_checked_when_created(region: Region) -> None:
    api = region.api

    def child(name: str, parent: str, cpu: int, **fields: Any) -> dict[str, Any]:
        return {"name": name, "parent": parent, "quota": {"resources": {"cpu": cpu}}, **fields}

    await lead(region.store, *SHARDS)
    org = {"name": "org", "quota": {"resources": {"cpu": 10_000}}}
    assert (await api.post("/v1/entitlements", headers=ADMIN, json=org)).status_code == 201
    made = await api.post("/v1/entitlements", headers=ADMIN, json=child("red", "org", 6000))
    assert made.status_code == 201, made.text
    org_shard = (await api.get("/v1/entitlements/org", headers=ADMIN)).json()["shard"]
    assert made.json()["shard"] == org_shard
    revision = await region.store.revision()
    for body, loc, fragment in (
        (child("blue", "nope", 1000), ["parent"], "no entitlement is named 'nope'"),
        (
            child("blue", "org", 5000),
            ["quota", "resources"],
            "the children of 'org' (blue, red) would be guaranteed more than its quota",
        ),
        (
            child("blue", "org", 1000, borrowing_limit={"cpu": 9500}),
            ["borrowing_limit"],
            "exceed the quota of its parent 'org'",
        ),
        (
            {"name": "top", "borrowing_limit": {"cpu": 1}},
            ["borrowing_limit"],
            "only an entitlement with a parent can borrow",
        ),
        (
            child("blue", "org", 1000, lending_limit={"cpu": 2000}),
            ["lending_limit"],
            "cannot lend more than its own quota",
        ),
    ):
        answer = await api.post("/v1/entitlements", headers=ADMIN, json=body)
        problem = assert_problem(answer, 422)
        assert [error["loc"] for error in problem["errors"]] == [loc], problem
        assert fragment in problem["errors"][0]["msg"]
    assert await region.store.revision() == revision


async def test_a_queue_lists_its_waiting_jobs_in_order(region: Region) -> None:
    api = region.api
    deadline = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    for body in (
        batch("plain", 3),
        batch("soon", 3, deadline=deadline, expected_duration_s=600),
        batch("elastic", 4, min_count=2, priority=200),
    ):
        assert (await api.post("/v1/jobs", headers=ALICE, json=body)).status_code == 201

    async def listed() -> dict[str, Any]:
        return (await api.get("/v1/queues/team-a", headers=ALICE)).json()  # type: ignore[no-any-return]

    # The frontend orders the queue from its watch of the admission records.
    queue = await eventually(listed, lambda q: q["total"] == 3, what="three jobs queued")
    assert queue["entitlement"] == "team-a"
    assert queue["use"] is None  # no scheduler here reports it
    order = [(job["position"], job["job"]) for job in queue["jobs"]]
    assert order == [(1, "team-a/elastic"), (2, "team-a/soon"), (3, "team-a/plain")]
    elastic, soon, plain = queue["jobs"]
    assert (elastic["tasks"], elastic["least_tasks"]) == (4, 2)
    assert elastic["requested"]["cpu"] == 4000
    assert soon["start_deadline"] is not None
    assert plain["start_deadline"] is None
    assert all(job["waiting_s"] >= 0 for job in queue["jobs"])
    page = (await api.get("/v1/queues/team-a?offset=1&limit=1", headers=ALICE)).json()
    assert (page["total"], page["offset"]) == (3, 1)
    assert [(job["position"], job["job"]) for job in page["jobs"]] == [(2, "team-a/soon")]
    for bad in ("limit=0", "offset=-1", "limit=10001"):
        assert_problem(await api.get(f"/v1/queues/team-a?{bad}", headers=ALICE), 422)
    assert_problem(await api.get("/v1/queues/team-a", headers=MALLORY), 403)
    assert_problem(await api.get("/v1/queues/nope", headers=ADMIN), 404)


async def test_the_queue_list_shows_what_the_deciders_reported_to_members(
    region: Region,
) -> None:
    now = datetime.now(UTC)
    uses = [
        EntitlementUse(
            name=name,
            weight=1,
            quota=Resources(cpu=4000),
            reserved=Resources(cpu=1000),
            borrowed=Resources(),
            lent=Resources(),
            dominant_share=0.25,
            queued=2,
            admitted=1,
        )
        for name in ("team-a", "team-b")
    ]
    status = QueueStatus(root="team-a", decider="test", entitlements=uses, updated_at=now)
    await region.store.put(keys.queue_status("team-a"), to_json(status))
    mine = (await region.api.get("/v1/queues", headers=ALICE)).json()["queues"]
    assert [(use["name"], use["queued"], use["reserved"]["cpu"]) for use in mine] == [
        ("team-a", 2, 1000)
    ]
    everything = (await region.api.get("/v1/queues", headers=ADMIN)).json()["queues"]
    assert [use["name"] for use in everything] == ["team-a", "team-b"]


async def test_admins_replace_an_entitlement_within_its_tree(region: Region) -> None:
    api = region.api
    await lead(region.store, *SHARDS)
    for body in (
        {"name": "org", "quota": {"resources": {"cpu": 10_000}}},
        {"name": "red", "parent": "org", "quota": {"resources": {"cpu": 6000}}},
        {"name": "deep", "parent": "red", "quota": {"resources": {"cpu": 1000}}},
    ):
        assert (await api.post("/v1/entitlements", headers=ADMIN, json=body)).status_code == 201
    revision = await region.store.revision()
    bad: list[tuple[str, dict[str, Any], list[str], str]] = [
        ("org", {"name": "org", "parent": "deep"}, ["parent"], "cycle of parents: org -> deep"),
        ("red", {"name": "red", "parent": "org"}, ["quota", "resources"], "children (deep)"),
        ("red", {"name": "blue"}, ["name"], "must be 'red'"),
    ]
    for name, replacement, loc, fragment in bad:
        answer = await api.put(f"/v1/entitlements/{name}", headers=ADMIN, json=replacement)
        problem = assert_problem(answer, 422)
        assert [error["loc"] for error in problem["errors"]] == [loc], problem
        assert fragment in problem["errors"][0]["msg"]
    assert_problem(
        await api.put("/v1/entitlements/nope", headers=ADMIN, json={"name": "nope"}), 404
    )
    bigger = {"name": "red", "parent": "org", "quota": {"resources": {"cpu": 7000}}, "weight": 3}
    assert_problem(await api.put("/v1/entitlements/red", headers=ALICE, json=bigger), 403)
    assert await region.store.revision() == revision
    replaced = await api.put("/v1/entitlements/red", headers=ADMIN, json=bigger)
    assert replaced.status_code == 200, replaced.text
    shown = (await api.get("/v1/entitlements/red", headers=ADMIN)).json()["entitlement"]
    assert (shown["quota"]["resources"]["cpu"], shown["weight"]) == (7000, 3)


async def test_admins_delete_an_entitlement_that_holds_nothing(region: Region) -> None:
    api = region.api
    await lead(region.store, *SHARDS)
    for body in (
        {"name": "org", "quota": {"resources": {"cpu": 10_000}}},
        {"name": "red", "parent": "org", "quota": {"resources": {"cpu": 4000}}},
    ):
        assert (await api.post("/v1/entitlements", headers=ADMIN, json=body)).status_code == 201
    assert (await api.post("/v1/jobs", headers=ALICE, json=batch("waits", 1))).status_code == 201
    entitlements = await region.store.count(keys.ENTITLEMENTS)
    assert_problem(await api.delete("/v1/entitlements/org", headers=ADMIN), 409, "child", "red")
    assert_problem(
        await api.delete("/v1/entitlements/team-a", headers=ADMIN), 409, "team-a/waits (queued)"
    )
    assert_problem(await api.delete("/v1/entitlements/red", headers=ALICE), 403)
    assert_problem(await api.delete("/v1/entitlements/nope", headers=ADMIN), 404)
    # The refused deletions took their markers back; nothing else was written.
    assert not (await region.store.range(keys.ENTITLEMENT_DELETIONS)).kvs
    assert await region.store.count(keys.ENTITLEMENTS) == entitlements
    for name in ("red", "org"):
        deleted = await api.delete(f"/v1/entitlements/{name}", headers=ADMIN)
        assert deleted.status_code == 200, deleted.text
        assert_problem(await api.get(f"/v1/entitlements/{name}", headers=ADMIN), 404)
        assert await region.store.get(keys.shard_assignment(name)) is None


async def test_nothing_joins_an_entitlement_while_it_is_being_deleted(region: Region) -> None:
    api = region.api
    await lead(region.store, *SHARDS)
    # A deletion in progress: its marker is in the store (on a lease in a real deletion).
    await region.store.put(keys.entitlement_deletion("team-a"), b"admin")
    revision = await region.store.revision()
    refused = await api.post("/v1/jobs", headers=ALICE, json=batch("late", 1))
    assert_problem(refused, 409, "team-a", "is being deleted")
    child = {"name": "late-child", "parent": "team-a", "quota": {"resources": {"cpu": 1000}}}
    assert_problem(await api.post("/v1/entitlements", headers=ADMIN, json=child), 409)
    assert await region.store.revision() == revision
    await region.store.delete(keys.entitlement_deletion("team-a"))
    assert (await api.post("/v1/jobs", headers=ALICE, json=batch("late", 1))).status_code == 201


async def test_a_deletion_racing_submissions_never_leaves_a_job_without_its_entitlement(
    region: Region,
) -> None:
    api = region.api
    await lead(region.store, *SHARDS)
    outcomes = set()
    for attempt in range(15):
        name = f"brief-{attempt}"
        body = {"name": name, "quota": {"resources": {"cpu": 10_000}}, "members": ["alice"]}
        assert (await api.post("/v1/entitlements", headers=ADMIN, json=body)).status_code == 201
        spec = batch("racer", 1) | {"entitlement": name}
        deleted, submitted = await asyncio.gather(
            api.delete(f"/v1/entitlements/{name}", headers=ADMIN),
            api.post("/v1/jobs", headers=ALICE, json=spec),
        )
        entitlement = await region.store.get(keys.entitlement(name))
        job = await region.store.get(keys.job(name, "racer"))
        assert job is None or entitlement is not None, (deleted.text, submitted.text)
        assert (deleted.status_code == 200) == (entitlement is None)
        assert (submitted.status_code == 201) == (job is not None)
        outcomes.add((deleted.status_code, submitted.status_code))
    assert not (await region.store.range(keys.ENTITLEMENT_DELETIONS)).kvs
    # Each attempt ends one of these ways: the deletion first (the submission refused because
    # the entitlement is being deleted or is gone), or the job first (the deletion refused).
    assert outcomes <= {(200, 409), (200, 404), (409, 201), (200, 403)}, outcomes
