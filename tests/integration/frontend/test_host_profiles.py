"""/v1/host-profiles over real HTTP: create, list, show and delete, who may, and what refuses."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.frontend.conftest import ADMIN, ALICE, SHARDS, Region, lead
from tests.integration.frontend.problems import assert_problem
from tests.integration.frontend.test_views import machine
from tests.support.allocations import put_allocation
from tether.model import Allocation, HostProfile, from_json, to_json
from tether.store import keys

WEB: dict[str, Any] = {
    "name": "web",
    "description": "front ends",
    "settings": {"hugepages": "2048", "governor": "performance"},
    "switch_seconds": 2.5,
}


async def stored(region: Region, name: str) -> HostProfile | None:
    kv = await region.store.get(keys.host_profile(name))
    return None if kv is None else from_json(HostProfile, kv.value, stored=True)


async def test_an_admin_creates_and_deletes_profiles_everyone_reads(region: Region) -> None:
    api = region.api
    created = await api.post("/v1/host-profiles", headers=ADMIN, json=WEB)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/host-profiles/web"
    assert created.json() == WEB
    assert await stored(region, "web") == HostProfile.model_validate(WEB)
    # The fields left out take their defaults.
    batch = await api.post("/v1/host-profiles", headers=ADMIN, json={"name": "batch"})
    assert batch.json() == {"name": "batch", "description": "", "settings": {}, "switch_seconds": 0}

    listed = await api.get("/v1/host-profiles", headers=ALICE)
    assert listed.status_code == 200
    assert [profile["name"] for profile in listed.json()["host_profiles"]] == ["batch", "web"]
    shown = await api.get("/v1/host-profiles/web", headers=ALICE)
    assert (shown.status_code, shown.json()) == (200, WEB)

    # Created once, never replaced: the machines that carry it switched to it as it was.
    again = await api.post("/v1/host-profiles", headers=ADMIN, json=WEB | {"switch_seconds": 9})
    assert_problem(again, 409, "host profile 'web' already exists")
    assert await stored(region, "web") == HostProfile.model_validate(WEB)

    deleted = await api.delete("/v1/host-profiles/web", headers=ADMIN)
    assert (deleted.status_code, deleted.json()) == (200, WEB)
    assert await stored(region, "web") is None
    assert_problem(await api.get("/v1/host-profiles/web", headers=ALICE), 404, "'web'")
    assert_problem(await api.delete("/v1/host-profiles/web", headers=ADMIN), 404, "'web'")
    # "webs" starts like "web": a read of one profile is of that key alone.
    await api.post("/v1/host-profiles", headers=ADMIN, json={"name": "webs"})
    assert_problem(await api.get("/v1/host-profiles/web", headers=ALICE), 404)


async def test_reading_needs_a_token_and_writing_the_admin_role(region: Region) -> None:
    api = region.api
    assert_problem(await api.get("/v1/host-profiles"), 401)
    assert_problem(await api.get("/v1/host-profiles/web"), 401)
    assert_problem(await api.post("/v1/host-profiles", json=WEB), 401)
    refused = await api.post("/v1/host-profiles", headers=ALICE, json=WEB)
    assert_problem(refused, 403, "principal 'alice' is not an admin")
    assert await stored(region, "web") is None

    await api.post("/v1/host-profiles", headers=ADMIN, json=WEB)
    assert_problem(await api.delete("/v1/host-profiles/web"), 401)
    assert_problem(await api.delete("/v1/host-profiles/web", headers=ALICE), 403, "not an admin")
    assert await stored(region, "web") is not None


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "Web_1"}, ["name"]),
        ({"switch_seconds": -1}, ["switch_seconds"]),
        ({"switch_seconds": 1e9}, ["switch_seconds"]),
        ({"settings": {"hugepages": 2048}}, ["settings", "hugepages"]),
        ({"colour": "blue"}, ["colour"]),
    ],
)
async def test_a_bad_profile_is_422_naming_the_field_and_stores_nothing(
    region: Region, change: dict[str, Any], field: list[str]
) -> None:
    refused = await region.api.post("/v1/host-profiles", headers=ADMIN, json=WEB | change)
    problem = assert_problem(refused, 422, ".".join(field))
    assert [error["loc"] for error in problem["errors"]] == [field]
    assert (await region.store.range(keys.HOST_PROFILES)).kvs == []


async def test_a_bad_name_in_the_path_is_422(region: Region) -> None:
    problem = assert_problem(await region.api.get("/v1/host-profiles/Web_1", headers=ALICE), 422)
    assert problem["errors"][0]["loc"] == ["path", "name"]


async def test_an_entitlement_using_a_profile_keeps_it(region: Region) -> None:
    api = region.api
    await lead(region.store, *SHARDS)
    # An entitlement may name a profile that has no record yet (its machines switch to it with
    # no settings); once the profile exists, the entitlement holds on to it.
    for name in ("ads", "search"):
        entitlement = {"name": name, "host_profile": "web"}
        created = await api.post("/v1/entitlements", headers=ADMIN, json=entitlement)
        assert created.status_code == 201, created.text
    await api.post("/v1/host-profiles", headers=ADMIN, json=WEB)
    refused = await api.delete("/v1/host-profiles/web", headers=ADMIN)
    assert_problem(refused, 409, "host profile 'web' is in use: entitlement(s) ads, search name it")
    assert await stored(region, "web") is not None


async def test_machines_that_carry_a_profile_or_are_asked_for_it_keep_it(
    region: Region,
) -> None:
    api, store = region.api, region.store
    await api.post("/v1/host-profiles", headers=ADMIN, json=WEB)
    await store.put(keys.machine("m1"), to_json(machine("m1", host_profile="web")))
    await store.put(keys.machine("m2"), to_json(machine("m2")))
    await put_allocation(store, Allocation(machine="m1"))
    await put_allocation(store, Allocation(machine="m2", entitlement="team-a", host_profile="web"))
    refused = await api.delete("/v1/host-profiles/web", headers=ADMIN)
    assert_problem(
        refused,
        409,
        "machine(s) m1 carry it; the allocation record(s) of machine(s) m2 ask for it",
    )

    # m2 went back to the free pool still carrying web; then m1 and m2 switched to batch.
    await put_allocation(store, Allocation(machine="m2"))
    await store.put(keys.machine("m2"), to_json(machine("m2", host_profile="web")))
    assert_problem(await api.delete("/v1/host-profiles/web", headers=ADMIN), 409, "m1, m2 carry")
    for machine_id in ("m1", "m2"):
        await store.put(
            keys.machine(machine_id), to_json(machine(machine_id, host_profile="batch"))
        )
    deleted = await api.delete("/v1/host-profiles/web", headers=ADMIN)
    assert deleted.status_code == 200, deleted.text
    assert await stored(region, "web") is None
