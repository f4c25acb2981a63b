"""/v1/throughput-profiles over real HTTP: an entitlement's members put, read and delete its
accelerator throughput profiles; others cannot; a bad table is refused naming where."""

from __future__ import annotations

from typing import Any

from tests.integration.frontend.conftest import ADMIN, ALICE, MALLORY, Region
from tests.integration.frontend.problems import assert_problem
from tether.model import from_json
from tether.model.accelerator import ThroughputProfile, ThroughputProfileRecord
from tether.store import keys

TABLE: dict[str, Any] = {
    "v100": {"ResNet-50": {"1": 4.39, "2": 8.1}},
    "k80": {"ResNet-50": {"1": 0.62}},
}
PATH = "/v1/throughput-profiles/team-a/measured"


async def test_members_put_read_and_delete_their_entitlements_profiles(region: Region) -> None:
    api = region.api
    put = await api.put(PATH, headers=ALICE, json={"throughputs": TABLE})
    assert put.status_code == 200, put.text
    assert put.json() == {"name": "measured", "entitlement": "team-a", "throughputs": TABLE}
    kv = await region.store.get(keys.throughput_profile("team-a", "measured"))
    assert kv is not None
    stored = from_json(ThroughputProfileRecord, kv.value, stored=True)
    profile = ThroughputProfile.parse(stored.throughputs)
    assert profile.throughputs("ResNet-50", 1) == {"v100": 4.39, "k80": 0.62}
    # Replaced by a second put.
    faster = {"v100": {"ResNet-50": {"1": 5.0}}}
    assert (await api.put(PATH, headers=ALICE, json={"throughputs": faster})).is_success
    assert (await api.get(PATH, headers=ALICE)).json()["throughputs"] == faster

    listed = await api.get("/v1/throughput-profiles", headers=ALICE)
    assert [p["name"] for p in listed.json()["throughput_profiles"]] == ["measured"]
    theirs = await api.get("/v1/throughput-profiles", headers=MALLORY)
    assert theirs.json()["throughput_profiles"] == []
    assert (
        len((await api.get("/v1/throughput-profiles", headers=ADMIN)).json()["throughput_profiles"])
        == 1
    )

    deleted = await api.delete(PATH, headers=ALICE)
    assert deleted.json()["throughputs"] == faster
    assert_problem(await api.get(PATH, headers=ALICE), 404, "'team-a/measured' does not exist")


async def test_bad_tables_and_strangers_change_nothing(region: Region) -> None:
    api = region.api
    revision = await region.store.revision()
    zero = {"throughputs": {"v100": {"ResNet-50": {"0": 1.0}}}}
    refused = assert_problem(await api.put(PATH, headers=ALICE, json=zero), 422)
    assert "v100 / ResNet-50: scale factor '0' is not 1 or more" in str(refused["errors"])
    negative = {"throughputs": {"v100": {"ResNet-50": {"1": -3}}}}
    refused = assert_problem(await api.put(PATH, headers=ALICE, json=negative), 422)
    assert "-3" in str(refused["errors"])
    shapeless = await api.put(PATH, headers=ALICE, json={"throughputs": {"v100": 3}})
    assert_problem(shapeless, 422)
    stranger = await api.put(PATH, headers=MALLORY, json={"throughputs": TABLE})
    assert_problem(stranger, 403, "not a member of entitlement 'team-a'")
    nowhere = "/v1/throughput-profiles/nope/measured"
    assert_problem(await api.put(nowhere, headers=ALICE, json={"throughputs": TABLE}), 404)
    assert await region.store.revision() == revision
