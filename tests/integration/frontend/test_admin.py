"""Entitlements, principals, health, readiness and the OpenAPI docs over real HTTP."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.integration.frontend.conftest import (
    ADMIN,
    ALICE,
    MALLORY,
    SHARDS,
    Region,
    job_spec,
    lead,
    serving,
)
from tests.integration.frontend.problems import assert_problem
from tests.integration.frontend.test_views import seed_tasks
from tests.support.allocations import put_allocation
from tests.support.waiting import eventually
from tether.model import (
    Allocation,
    Entitlement,
    PrincipalRecord,
    RegionConfig,
    Resources,
    Role,
    from_json,
    to_json,
    token_digest,
)
from tether.store import Store, keys

ZERO = {"cpu": 0, "memory_mib": 0, "disk_gib": 0, "gpus": 0, "extra": {}}


async def test_readyz_waits_for_the_region_config(store: Store, store_url: str) -> None:
    async with serving(store_url) as api:
        assert (await api.get("/healthz")).json() == {"status": "ok"}
        assert_problem(await api.get("/readyz"), 503, "not initialised")
        # Without a region config, creating an entitlement cannot pick a shard.
        await store.put(
            keys.principal(token_digest("t")),
            to_json(PrincipalRecord(name="root", roles=[Role.ADMIN])),
        )
        create = await api.post(
            "/v1/entitlements", headers={"Authorization": "Bearer t"}, json={"name": "x"}
        )
        assert_problem(create, 503, "not initialised")
        config = RegionConfig(name="r", shards=SHARDS, created_at=datetime.now(UTC))
        await store.put(keys.region_config(), to_json(config))
        ready = await api.get("/readyz")
        assert ready.status_code == 200
        assert ready.json() == {"status": "ready", "warnings": []}


async def test_readyz_and_the_shard_list_flag_a_shard_with_entitlements_but_no_leader(
    region: Region,
) -> None:
    api = region.api
    ready = await api.get("/readyz")
    assert ready.status_code == 200
    [warning] = ready.json()["warnings"]
    assert "shard 'shard-0' holds entitlements team-a, team-b but has no leader" in warning
    shards = (await api.get("/admin/shards", headers=ADMIN)).json()["shards"]
    assert [s["warning"] for s in shards] == [warning, None]
    await lead(region.store, "shard-0")
    assert (await api.get("/readyz")).json()["warnings"] == []
    shards = (await api.get("/admin/shards", headers=ADMIN)).json()["shards"]
    assert [s["warning"] for s in shards] == [None, None]


async def test_openapi_and_docs_need_no_token(region: Region) -> None:
    document = (await region.api.get("/openapi.json")).json()
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert {"type": "http", "scheme": "bearer"}.items() <= scheme.items()
    assert {"/v1/jobs", "/v1/jobs/{ent}/{job}/tasks/{index}/logs", "/admin/principals"} <= set(
        document["paths"]
    )
    submit = document["paths"]["/v1/jobs"]["post"]
    assert submit["security"] == [{"bearer": []}]
    assert set(submit["requestBody"]["content"]) == {"application/json", "application/yaml"}
    # Every schema a route refers to is in the document.
    for name in ("JobSpec", "Entitlement", "PrincipalRecord", "JobView", "ProblemDetails"):
        assert name in document["components"]["schemas"]
    docs = await region.api.get("/docs")
    assert docs.status_code == 200
    assert "swagger-ui" in docs.text


async def test_entitlements(region: Region) -> None:
    api, store = region.api, region.store
    body = {"name": "team-c", "members": ["alice"], "quota": {"resources": {"cpu": 2000}}}
    # No shard has a leader: the entitlement's jobs would never be scheduled.
    revision = await store.revision()
    refused = await api.post("/v1/entitlements", headers=ADMIN, json=body)
    assert_problem(refused, 409, "no scheduler shard that takes entitlements has a leader")
    assert await store.revision() == revision

    await lead(store, *SHARDS)
    created = await api.post("/v1/entitlements", headers=ADMIN, json=body)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/entitlements/team-c"
    view = created.json()
    # team-a and team-b are on shard-0, but neither owns a machine nor has a task: a tie on
    # machines and tasks, which the shard with fewer entitlements wins.
    assert view["shard"] == SHARDS[1]
    assert view["entitlement"]["quota"]["resources"]["cpu"] == 2000
    assert (view["requested"], view["allocated"]) == (ZERO, ZERO)
    shard = await store.get(keys.shard_assignment("team-c"))
    assert shard is not None
    assert shard.value == view["shard"].encode()
    stored = await store.get(keys.entitlement("team-c"))
    assert stored is not None
    assert from_json(Entitlement, stored.value).members == ["alice"]

    revision = await store.revision()
    assert_problem(await api.post("/v1/entitlements", headers=ADMIN, json=body), 409, "exists")
    assert_problem(await api.post("/v1/entitlements", headers=ALICE, json=body), 403, "admin")
    invalid = await api.post("/v1/entitlements", headers=ADMIN, json={"name": "Bad Name"})
    assert assert_problem(invalid, 422)["errors"][0]["loc"] == ["name"]
    assert_problem(await api.post("/v1/entitlements", headers=ADMIN, content="{"), 400)
    assert await store.revision() == revision

    mine = (await api.get("/v1/entitlements", headers=ALICE)).json()["entitlements"]
    assert [ent["name"] for ent in mine] == ["team-a", "team-c"]
    everything = (await api.get("/v1/entitlements", headers=ADMIN)).json()["entitlements"]
    assert [ent["name"] for ent in everything] == ["team-a", "team-b", "team-c"]
    assert_problem(await api.get("/v1/entitlements/nope", headers=ADMIN), 404)


async def test_entitlement_shows_requested_and_allocated(region: Region) -> None:
    api = region.api
    assert (await api.post("/v1/jobs", headers=ALICE, json=job_spec("a", count=2))).is_success
    assert (await api.post("/v1/jobs", headers=ALICE, json=job_spec("b", count=1))).is_success
    assert (await api.delete("/v1/jobs/team-a/b", headers=ALICE)).status_code == 202
    held = Resources(cpu=1000, memory_mib=512)
    tasks = {"team-a/a/0": held, "team-b/x/0": held}
    await put_allocation(region.store, Allocation(machine="m1"), tasks)

    view = (await api.get("/v1/entitlements/team-a", headers=ALICE)).json()
    assert view.keys() == {"entitlement", "shard", "requested", "allocated"}
    assert view["shard"] == "shard-0"
    assert view["requested"] == ZERO | {"cpu": 2000, "memory_mib": 1024}
    assert view["allocated"] == ZERO | {"cpu": 1000, "memory_mib": 512}


async def test_admins_create_principals(region: Region) -> None:
    api = region.api
    body = {"name": "bob@example.com", "roles": ["admin"]}
    revision = await region.store.revision()
    assert_problem(await api.post("/admin/principals", headers=ALICE, json=body), 403, "admin")
    assert_problem(await api.post("/admin/principals", json=body), 401)
    wrong_role = await api.post(
        "/admin/principals", headers=ADMIN, json={"name": "b", "roles": ["x"]}
    )
    assert assert_problem(wrong_role, 422)["errors"][0]["loc"] == ["roles", 0]
    assert await region.store.revision() == revision

    created = await api.post("/admin/principals", headers=ADMIN, json=body)
    assert created.status_code == 201, created.text
    answer = created.json()
    assert answer.keys() == {"name", "roles", "token"}
    assert (answer["name"], answer["roles"]) == ("bob@example.com", ["admin"])
    stored = await region.store.get(keys.principal(token_digest(answer["token"])))
    assert stored is not None
    assert from_json(PrincipalRecord, stored.value).is_admin
    bob = {"Authorization": f"Bearer {answer['token']}"}
    listed = await api.get("/v1/entitlements", headers=bob)
    assert len(listed.json()["entitlements"]) == 2

    plain = await api.post("/admin/principals", headers=bob, json={"name": "carol"})
    assert plain.status_code == 201
    assert plain.json()["roles"] == []
    carol = {"Authorization": f"Bearer {plain.json()['token']}"}
    assert (await api.get("/v1/machines", headers=carol)).status_code == 200
    assert (await api.get("/v1/entitlements", headers=carol)).json()["entitlements"] == []
    assert (await api.get("/v1/jobs", headers=MALLORY)).json() == {"jobs": []}


async def test_a_new_entitlement_joins_the_least_loaded_shard_and_shards_are_listed(
    region: Region,
) -> None:
    api, store = region.api, region.store
    await lead(store, *SHARDS)
    # team-a (shard-0) owns a machine and has a job with two tasks and an operation.
    await store.put(keys.allocation("m1"), to_json(Allocation(machine="m1", entitlement="team-a")))
    submitted = await api.post("/v1/jobs", headers=ALICE, json=job_spec("web", count=2, cpu=100))
    assert submitted.status_code == 201, submitted.text
    await seed_tasks(store)
    asked = await api.post(
        "/v1/jobs/team-a/web/operations", headers=ALICE, json={"kind": "restart", "tasks": [0]}
    )
    assert asked.status_code == 202, asked.text

    body = {"name": "team-c", "members": ["alice"], "quota": {"resources": {"cpu": 2000}}}
    created = await api.post("/v1/entitlements", headers=ADMIN, json=body)
    assert created.json()["shard"] == "shard-1"
    # shard-1 now has team-c but still no machine, so it stays the least loaded.
    body["name"] = "team-d"
    assert (await api.post("/v1/entitlements", headers=ADMIN, json=body)).json()[
        "shard"
    ] == "shard-1"

    assert_problem(await api.get("/admin/shards", headers=ALICE), 403, "admin")

    async def listed() -> list[dict[str, Any]]:
        return list((await api.get("/admin/shards", headers=ADMIN)).json()["shards"])

    def counts(shard: dict[str, Any]) -> tuple[int, int, int, int]:
        return shard["jobs"], shard["tasks"], shard["machines"], shard["operations"]

    # The counts come from feeds of their own, which may lag the writes above a moment.
    shards = await eventually(
        listed, lambda now: counts(now[0]) == (1, 4, 1, 1), what="shard-0's counts"
    )
    assert [s["shard"] for s in shards] == SHARDS
    first, second = shards
    assert first["entitlements"] == ["team-a", "team-b"]
    assert second["entitlements"] == ["team-c", "team-d"]
    assert (second["jobs"], second["tasks"], second["machines"]) == (0, 0, 0)
    assert first["leader"] == "test:shard-0"
