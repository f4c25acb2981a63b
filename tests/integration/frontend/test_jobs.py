"""Jobs over real HTTP: submit (JSON, YAML, idempotency, quota, errors), list, show, scale,
delete, and who may see what."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import yaml

from tests.integration.frontend.conftest import ADMIN, ALICE, MALLORY, Region, job_spec
from tests.integration.frontend.problems import assert_problem
from tether.model import Job, from_json
from tether.store import keys

JOB_VIEW_KEYS = {
    "handle",
    "entitlement",
    "name",
    "count",
    "generation",
    "deleting",
    "created_at",
    "updated_at",
    "spec",
    "tasks",
    "running",
    "operations",
    "control",
    "admission",
    "queue_position",
    "progress",
}


async def stored_job(region: Region, name: str) -> Job | None:
    kv = await region.store.get(keys.job("team-a", name))
    return None if kv is None else from_json(Job, kv.value, stored=True)


async def test_submit_json_and_yaml(region: Region) -> None:
    created = await region.api.post("/v1/jobs", headers=ALICE, json=job_spec("web"))
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/jobs/team-a/web"
    view = created.json()
    assert view.keys() == JOB_VIEW_KEYS
    assert view["handle"] == "team-a/web"
    assert (view["entitlement"], view["name"], view["count"]) == ("team-a", "web", 2)
    assert (view["generation"], view["deleting"], view["running"]) == (1, False, 0)
    assert view["tasks"]["pending"] == 0
    assert (view["operations"], view["control"]) == ({}, None)
    assert view["spec"]["task"]["resources"]["cpu"] == 1000

    as_yaml = yaml.safe_dump(job_spec("batch", count=1, kind="batch"))
    created = await region.api.post(
        "/v1/jobs", headers=ALICE | {"Content-Type": "application/yaml"}, content=as_yaml
    )
    assert created.status_code == 201, created.text
    assert created.json()["spec"]["kind"] == "batch"

    stored = await stored_job(region, "batch")
    assert stored is not None
    assert (stored.generation, stored.deleting, stored.spec.count) == (1, False, 1)
    shown = await region.api.get("/v1/jobs/team-a/web", headers=ALICE)
    assert shown.status_code == 200
    assert shown.json() == view
    listed = await region.api.get("/v1/jobs", headers=ALICE)
    assert [job["handle"] for job in listed.json()["jobs"]] == ["team-a/batch", "team-a/web"]


async def test_idempotent_resubmission(region: Region) -> None:
    key = {"Idempotency-Key": "deploy-42"}
    first = await region.api.post("/v1/jobs", headers=ALICE | key, json=job_spec())
    assert first.status_code == 201

    # The same spec as YAML is the same submission; a second token of alice shares her keys.
    token = await region.api.post("/admin/principals", headers=ADMIN, json={"name": "alice"})
    alice_again = {"Authorization": f"Bearer {token.json()['token']}"}
    revision = await region.store.revision()
    again = await region.api.post(
        "/v1/jobs",
        headers=alice_again | key | {"Content-Type": "application/yaml"},
        content=yaml.safe_dump(job_spec()),
    )
    assert again.status_code == 200, again.text
    assert again.json() == first.json()
    assert again.headers["location"] == "/v1/jobs/team-a/web"
    assert await region.store.revision() == revision
    assert await region.store.count(keys.JOBS) == 1

    reused = await region.api.post("/v1/jobs", headers=ALICE | key, json=job_spec(count=3))
    assert_problem(reused, 409, "Idempotency-Key 'deploy-42'", "different spec")
    other_job = await region.api.post("/v1/jobs", headers=ALICE | key, json=job_spec("api"))
    assert_problem(other_job, 409, "different spec")
    assert await region.store.revision() == revision

    # Without the key, resubmitting is a conflict with the existing job.
    duplicate = await region.api.post("/v1/jobs", headers=ALICE, json=job_spec())
    assert_problem(duplicate, 409, "'team-a/web' already exists")


async def test_bad_submissions_change_nothing(region: Region) -> None:
    api = region.api
    revision = await region.store.revision()
    yaml_type = {"Content-Type": "application/yaml"}
    no_memory = job_spec()
    no_memory["task"]["resources"]["cpu"] = -5

    malformed = await api.post("/v1/jobs", headers=ALICE | yaml_type, content="name: [web")
    assert_problem(malformed, 400, "not usable YAML")
    assert_problem(await api.post("/v1/jobs", headers=ALICE, content="{"), 400, "not valid JSON")

    invalid = await api.post("/v1/jobs", headers=ALICE, json=no_memory)
    problem = assert_problem(invalid, 422, "task.resources.cpu")
    assert problem["errors"] == [
        {"loc": ["task", "resources", "cpu"], "msg": "Input should be greater than or equal to 0"}
    ]
    too_many = await api.post("/v1/jobs", headers=ALICE, json=job_spec(count=20_001))
    assert assert_problem(too_many, 422)["errors"][0]["loc"] == ["count"]

    unknown = await api.post("/v1/jobs", headers=ALICE, json=job_spec(entitlement="nope"))
    assert_problem(unknown, 404, "entitlement 'nope' does not exist")
    over = await api.post("/v1/jobs", headers=ALICE, json=job_spec(count=5))
    assert_problem(over, 409, "quota", "cpu: need 5000 millicores, 4000 free")
    bad_key = await api.post(
        "/v1/jobs", headers=ALICE | {"Idempotency-Key": "a/b"}, json=job_spec()
    )
    assert_problem(bad_key, 400, "Idempotency-Key")

    missing = await api.post("/v1/jobs", json=job_spec())
    assert_problem(missing, 401, "Authorization: Bearer")
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = await api.post("/v1/jobs", headers={"Authorization": "Bearer nope"}, json=job_spec())
    assert_problem(wrong, 401, "not known")
    assert wrong.headers["www-authenticate"] == "Bearer"
    basic = await api.get("/v1/jobs", headers={"Authorization": "Basic YTpi"})
    assert_problem(basic, 401)
    outsider = await api.post("/v1/jobs", headers=MALLORY, json=job_spec())
    assert_problem(outsider, 403, "'mallory' is not a member of entitlement 'team-a'")

    assert await region.store.revision() == revision


async def test_durations_past_any_date_are_422_naming_the_field(region: Region) -> None:
    # A start deadline and a restart's due time are dates: these were 500s (the first found
    # while looking for what the API property pass could not reach).
    soon = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    late = job_spec("late", kind="batch", deadline=soon, expected_duration_s=1e12)
    slow = job_spec("slow")
    slow["task"]["restart"] = {"backoff_initial_s": 1e300, "backoff_max_s": 1e300}
    for body, field in ((late, ["expected_duration_s"]), (slow, ["task", "restart"])):
        problem = assert_problem(await region.api.post("/v1/jobs", headers=ALICE, json=body), 422)
        assert {tuple(error["loc"][:2]) for error in problem["errors"]} == {tuple(field)}


async def test_a_service_that_cannot_start_now_is_refused(region: Region) -> None:
    assert (await region.api.post("/v1/jobs", headers=ALICE, json=job_spec("a"))).is_success
    second = await region.api.post("/v1/jobs", headers=ALICE, json=job_spec("b", count=3))
    # No scheduler runs here: "a" waits at the head of the queue, and goes first.
    assert_problem(second, 409, "cpu: need 3000 millicores, 2000 free")
    # A job being deleted no longer counts.
    assert (await region.api.delete("/v1/jobs/team-a/a", headers=ALICE)).status_code == 202
    third = await region.api.post("/v1/jobs", headers=ALICE, json=job_spec("b", count=3))
    assert third.status_code == 201, third.text


async def test_non_members_see_nothing_of_other_entitlements(region: Region) -> None:
    assert (await region.api.post("/v1/jobs", headers=ALICE, json=job_spec())).is_success
    mine = job_spec("mine") | {"entitlement": "team-b"}
    assert (await region.api.post("/v1/jobs", headers=MALLORY, json=mine)).is_success

    listed = await region.api.get("/v1/jobs", headers=MALLORY)
    assert [job["handle"] for job in listed.json()["jobs"]] == ["team-b/mine"]
    everything = await region.api.get("/v1/jobs", headers=ADMIN)
    assert [job["handle"] for job in everything.json()["jobs"]] == ["team-a/web", "team-b/mine"]
    filtered = await region.api.get("/v1/jobs?entitlement=team-a", headers=ALICE)
    assert [job["handle"] for job in filtered.json()["jobs"]] == ["team-a/web"]

    for method, path in (
        ("GET", "/v1/jobs?entitlement=team-a"),
        ("GET", "/v1/jobs/team-a/web"),
        ("GET", "/v1/jobs/team-a/web/tasks"),
        ("GET", "/v1/jobs/team-a/web/tasks/0/logs"),
        ("DELETE", "/v1/jobs/team-a/web"),
        ("GET", "/v1/entitlements/team-a"),
    ):
        answer = await region.api.request(method, path, headers=MALLORY)
        assert_problem(answer, 403, "entitlement 'team-a'")
    revision = await region.store.revision()
    scale = await region.api.post("/v1/jobs/team-a/web/scale", headers=MALLORY, json={"count": 1})
    assert_problem(scale, 403)
    assert await region.store.revision() == revision


async def test_scale_and_delete(region: Region) -> None:
    api = region.api
    assert (await api.post("/v1/jobs", headers=ALICE, json=job_spec(count=2))).is_success

    scaled = await api.post("/v1/jobs/team-a/web/scale", headers=ALICE, json={"count": 3})
    assert scaled.status_code == 200, scaled.text
    assert (scaled.json()["count"], scaled.json()["generation"]) == (3, 2)
    stored = await stored_job(region, "web")
    assert stored is not None
    assert (stored.spec.count, stored.generation) == (3, 2)

    revision = await region.store.revision()
    same = await api.post("/v1/jobs/team-a/web/scale", headers=ALICE, json={"count": 3})
    assert same.json()["generation"] == 2
    over = await api.post("/v1/jobs/team-a/web/scale", headers=ALICE, json={"count": 5})
    assert_problem(over, 409, "cpu: need 5000 millicores, 4000 free")
    zero = await api.post("/v1/jobs/team-a/web/scale", headers=ALICE, json={"count": 0})
    assert assert_problem(zero, 422)["errors"][0]["loc"] == ["count"]
    huge = await api.post("/v1/jobs/team-a/web/scale", headers=ALICE, json={"count": 20_001})
    assert_problem(huge, 422, "max_tasks_per_job")
    text = await api.post("/v1/jobs/team-a/web/scale", headers=ALICE, json={"count": "4"})
    assert_problem(text, 422)
    broken = await api.post(
        "/v1/jobs/team-a/web/scale",
        headers=ALICE | {"Content-Type": "application/json"},
        content="{count",
    )
    assert_problem(broken, 400)
    unknown = await api.post("/v1/jobs/team-a/nope/scale", headers=ALICE, json={"count": 1})
    assert_problem(unknown, 404, "job 'team-a/nope' does not exist")
    assert await region.store.revision() == revision

    down = await api.post("/v1/jobs/team-a/web/scale", headers=ALICE, json={"count": 1})
    assert (down.json()["count"], down.json()["generation"]) == (1, 3)

    deleted = await api.delete("/v1/jobs/team-a/web", headers=ALICE)
    assert deleted.status_code == 202
    assert deleted.json()["deleting"] is True
    assert deleted.json()["generation"] == 3
    stored = await stored_job(region, "web")
    assert stored is not None
    assert stored.deleting
    revision = await region.store.revision()
    again = await api.delete("/v1/jobs/team-a/web", headers=ALICE)
    assert again.status_code == 202
    assert again.json()["deleting"] is True
    assert await region.store.revision() == revision

    scale = await api.post("/v1/jobs/team-a/web/scale", headers=ALICE, json={"count": 2})
    assert_problem(scale, 409, "being deleted")
    resubmit = await api.post("/v1/jobs", headers=ALICE, json=job_spec())
    assert_problem(resubmit, 409, "being deleted")
    assert_problem(await api.delete("/v1/jobs/team-a/nope", headers=ALICE), 404)
    assert_problem(await api.get("/v1/jobs/team-a/nope", headers=ALICE), 404)
    assert await region.store.revision() == revision


async def test_update_rolls_a_new_version_into_the_spec(region: Region) -> None:
    api = region.api
    assert (await api.post("/v1/jobs", headers=ALICE, json=job_spec(count=2))).is_success

    updated = await api.patch("/v1/jobs/team-a/web", headers=ALICE, json={"version": "2.0"})
    assert updated.status_code == 200, updated.text
    assert (updated.json()["spec"]["task"]["version"], updated.json()["generation"]) == ("2.0", 2)
    stored = await stored_job(region, "web")
    assert stored is not None
    assert (stored.spec.task.version, stored.generation, stored.spec.count) == ("2.0", 2, 2)

    revision = await region.store.revision()
    same = await api.patch("/v1/jobs/team-a/web", headers=ALICE, json={"version": "2.0"})
    assert same.json()["generation"] == 2
    bad = await api.patch("/v1/jobs/team-a/web", headers=ALICE, json={"version": "2 0"})
    assert assert_problem(bad, 422)["errors"][0]["loc"] == ["version"]
    extra = await api.patch("/v1/jobs/team-a/web", headers=ALICE, json={"version": "3", "count": 9})
    assert_problem(extra, 422)
    foreign = await api.patch("/v1/jobs/team-a/web", headers=MALLORY, json={"version": "3"})
    assert_problem(foreign, 403, "not a member of entitlement 'team-a'")
    missing = await api.patch("/v1/jobs/team-a/nope", headers=ALICE, json={"version": "3"})
    assert_problem(missing, 404, "job 'team-a/nope' does not exist")
    assert await region.store.revision() == revision

    assert (await api.delete("/v1/jobs/team-a/web", headers=ALICE)).status_code == 202
    deleting = await api.patch("/v1/jobs/team-a/web", headers=ALICE, json={"version": "3"})
    assert_problem(deleting, 409, "being deleted")


async def test_a_batch_job_is_suspended_placed_elsewhere_and_resumed(region: Region) -> None:
    api = region.api
    spec = job_spec("train", count=2, kind="batch")
    assert (await api.post("/v1/jobs", headers=ALICE, json=spec)).is_success
    elsewhere = {"constraints": [{"attribute": "gpu_type", "op": "in", "values": ["v100"]}]}

    revision = await region.store.revision()
    running = await api.patch("/v1/jobs/team-a/train", headers=ALICE, json={"placement": elsewhere})
    assert_problem(running, 409, "not suspended: its placement changes only while it is")
    nothing = await api.patch("/v1/jobs/team-a/train", headers=ALICE, json={})
    assert "name at least one of version, suspended, placement" in str(
        assert_problem(nothing, 422)["errors"]
    )
    assert await region.store.revision() == revision

    # Suspended and sent elsewhere in one request.
    suspended = await api.patch(
        "/v1/jobs/team-a/train", headers=ALICE, json={"suspended": True, "placement": elsewhere}
    )
    assert suspended.status_code == 200, suspended.text
    assert (suspended.json()["spec"]["suspended"], suspended.json()["generation"]) == (True, 2)
    resumed = await api.patch("/v1/jobs/team-a/train", headers=ALICE, json={"suspended": False})
    assert resumed.status_code == 200, resumed.text
    stored = await stored_job(region, "train")
    assert stored is not None
    assert (stored.spec.suspended, stored.generation) == (False, 3)
    assert stored.spec.placement.constraints[0].values == ["v100"]

    assert (await api.post("/v1/jobs", headers=ALICE, json=job_spec("web"))).is_success
    service = await api.patch("/v1/jobs/team-a/web", headers=ALICE, json={"suspended": True})
    assert "only batch jobs may be suspended" in str(assert_problem(service, 422)["errors"])
    submitted = await api.post("/v1/jobs", headers=ALICE, json=job_spec("web2", suspended=True))
    assert "only batch jobs may be suspended" in str(assert_problem(submitted, 422)["errors"])


async def test_bad_paths_and_methods_are_problems(region: Region) -> None:
    bad_name = await region.api.get("/v1/jobs/Team_A/web", headers=ALICE)
    assert assert_problem(bad_name, 422)["errors"][0]["loc"] == ["path", "ent"]
    assert_problem(await region.api.get("/v1/nothing", headers=ALICE), 404)
    assert_problem(await region.api.put("/v1/jobs", headers=ALICE), 405)
    huge = await region.api.post(
        "/v1/jobs", headers=ALICE, content=json.dumps(job_spec(args=["x" * 2_000_000]))
    )
    assert_problem(huge, 413)
