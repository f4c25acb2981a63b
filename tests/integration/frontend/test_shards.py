"""/admin/shards against real scheduler replicas: the shard view, failover, moves, add, drain."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from tests.integration.frontend.conftest import ADMIN, ALICE, SHARDS, Region, job_spec, lead
from tests.integration.frontend.problems import assert_problem
from tests.support.waiting import eventually
from tether.model import RegionConfig, from_json
from tether.scheduler.service import Scheduler
from tether.scheduler.settings import SchedulerSettings
from tether.store import Store, keys, open_store

FAST = SchedulerSettings(lease_ttl_s=3, resync_s=0.5, status_interval_s=0.2, region_poll_s=0.2)
# A failover hands the shard over by deleting the leader key, not by waiting out a lease: a
# longer lease keeps a loaded machine's stall of a few seconds from electing anew mid-test.
STEADY = FAST.model_copy(update={"lease_ttl_s": 15})


@contextlib.asynccontextmanager
async def replicas(
    store_url: str, *shards: str, settings: SchedulerSettings = FAST
) -> AsyncIterator[list[Scheduler]]:
    """A scheduler replica per shard named (repeat a shard for a standby), in this process."""
    started = [Scheduler(open_store(store_url), shard, settings) for shard in shards]
    try:
        for replica in started:
            await replica.start()
        yield started
    finally:
        for replica in started:
            await replica.stop()


async def shard_view(api: httpx.AsyncClient, shard: str) -> dict[str, Any]:
    response = await api.get("/admin/shards", headers=ADMIN)
    assert response.status_code == 200, response.text
    return next(s for s in response.json()["shards"] if s["shard"] == shard)


async def mapped_to(store: Store, entitlement: str) -> str | None:
    kv = await store.get(keys.shard_assignment(entitlement))
    return None if kv is None else kv.value.decode()


async def test_the_shard_view_shows_leader_standbys_lease_and_last_reconcile(
    region: Region, store_url: str
) -> None:
    api = region.api
    submitted = await api.post("/v1/jobs", headers=ALICE, json=job_spec("web", count=1))
    assert submitted.status_code == 201, submitted.text
    async with replicas(store_url, "shard-0", "shard-0", settings=STEADY) as (first, second):
        await eventually(lambda: _leading(first, second), timeout_s=10, what="a leader of shard-0")

        async def reported() -> dict[str, Any] | None:
            view = await shard_view(api, "shard-0")
            ready = view["last_reconcile_at"] and view["standbys"]
            return view if ready else None

        view = await eventually(reported, timeout_s=10, what="the leader's report")
        leader = first if first.leading.is_set() else second
        standby = second if leader is first else first
        assert view["leader"] == leader.election.identity
        assert view["leader_pid"] == os.getpid()
        assert [s["identity"] for s in view["standbys"]] == [standby.election.identity]
        expires = datetime.fromisoformat(view["lease_expires_at"])
        now = datetime.now(UTC)
        assert now < expires <= now + timedelta(seconds=STEADY.lease_ttl_s + 1)
        assert view["reconciles"] >= 1
        assert view["backlog"] is not None
        assert view["draining"] is False
        # No replica runs for shard-1: nobody leads it, nobody reports for it.
        idle = await shard_view(api, "shard-1")
        assert (idle["leader"], idle["standbys"], idle["last_reconcile_at"]) == (None, [], None)


async def _leading(*schedulers: Scheduler) -> bool:
    return any(scheduler.leading.is_set() for scheduler in schedulers)


async def test_failover_hands_leadership_to_the_standby(region: Region, store_url: str) -> None:
    api = region.api
    replicated = replicas(store_url, "shard-0", "shard-0", "shard-1", settings=STEADY)
    async with replicated as (first, second, lone):
        await eventually(lambda: _leading(first, second), timeout_s=10, what="a leader")
        await eventually(lambda: _leading(lone), timeout_s=10, what="shard-1's leader")
        view = await eventually(
            lambda: _with_standby(api), timeout_s=10, what="shard-0's standby announced"
        )
        previous = view["leader"]

        assert_problem(await api.post("/admin/shards/shard-0/failover", headers=ALICE), 403)
        assert_problem(
            await api.post("/admin/shards/shard-1/failover", headers=ADMIN), 409, "no standby"
        )
        assert_problem(await api.post("/admin/shards/nope/failover", headers=ADMIN), 404)

        answer = await api.post("/admin/shards/shard-0/failover", headers=ADMIN)
        assert answer.status_code == 202, answer.text
        assert answer.json()["previous_leader"] == previous
        standby = answer.json()["standbys"][0]["identity"]

        async def taken_over() -> str | None:
            leader = (await shard_view(api, "shard-0"))["leader"]
            return leader if leader not in (None, previous) else None

        assert await eventually(taken_over, timeout_s=10, what="the standby leading") == standby

        # The deposed leader stands back and stays a standby: it does not race to lead again.
        async def standing_back() -> dict[str, Any] | None:
            view = await shard_view(api, "shard-0")
            return view if [s["identity"] for s in view["standbys"]] == [previous] else None

        view = await eventually(standing_back, timeout_s=5, what="the deposed leader standing by")
        assert view["leader"] == standby


async def _with_standby(api: httpx.AsyncClient) -> dict[str, Any] | None:
    view = await shard_view(api, "shard-0")
    return view if view["leader"] and view["standbys"] else None


async def test_moving_an_entitlement(region: Region) -> None:
    api, store = region.api, region.store
    move = "/admin/shards/shard-0/move"
    assert_problem(await api.post(move, headers=ALICE, json={"entitlement": "team-a"}), 403)
    assert_problem(await api.post(move, headers=ADMIN, json={"entitlement": "nope"}), 404)
    assert_problem(
        await api.post(move, headers=ADMIN, json={"entitlement": "team-a", "to": "shard-9"}),
        404,
        "shard-9",
    )
    assert_problem(
        await api.post(move, headers=ADMIN, json={"entitlement": "team-a", "to": "shard-0"}),
        409,
        "already",
    )
    assert_problem(await api.post(move, headers=ADMIN, json={"entitlement": "Bad Name"}), 422)
    assert_problem(await api.post(move, headers=ADMIN, json={"team": "team-a"}), 422)
    # No other shard has a leader: the entitlement's jobs would not be scheduled there.
    assert_problem(
        await api.post(move, headers=ADMIN, json={"entitlement": "team-a", "to": "shard-1"}),
        409,
        "shard 'shard-1' has no leader",
    )
    assert_problem(
        await api.post(move, headers=ADMIN, json={"entitlement": "team-a"}),
        409,
        "no scheduler shard that takes entitlements has a leader (shard-1)",
    )
    assert await mapped_to(store, "team-a") == "shard-0"

    await lead(store, "shard-1")
    moved = await api.post(move, headers=ADMIN, json={"entitlement": "team-a"})
    assert moved.status_code == 200, moved.text
    body = moved.json()
    assert (body["entitlement"], body["from_shard"], body["to_shard"]) == (
        "team-a",
        "shard-0",
        "shard-1",
    )
    kv = await store.get(keys.shard_assignment("team-a"))
    assert kv is not None
    assert (kv.value, kv.mod_revision) == (b"shard-1", body["revision"])
    # It is no longer on shard-0: a second identical request changes nothing.
    assert_problem(
        await api.post(move, headers=ADMIN, json={"entitlement": "team-a"}),
        409,
        "is on shard 'shard-1'",
    )
    assert await mapped_to(store, "team-a") == "shard-1"


async def test_adding_and_draining_shards(region: Region) -> None:
    api, store = region.api, region.store
    assert_problem(await api.post("/admin/shards", headers=ALICE, json={"id": "shard-2"}), 403)
    assert_problem(await api.post("/admin/shards", headers=ADMIN, json={"id": "Shard 2"}), 422)
    assert_problem(await api.post("/admin/shards", headers=ADMIN, json={"id": "shard-0"}), 409)

    added = await api.post("/admin/shards", headers=ADMIN, json={"id": "shard-2"})
    assert added.status_code == 201, added.text
    assert (added.json()["shard"], added.json()["leader"]) == ("shard-2", None)
    assert await _config_shards(store) == ([*SHARDS, "shard-2"], [])

    # The new shard has no replicas yet, nor has shard-1: nobody could take shard-0's jobs.
    assert_problem(
        await api.post("/admin/shards/shard-0/drain", headers=ADMIN),
        409,
        "would leave team-a, team-b with nobody to schedule their jobs",
    )
    assert await _config_shards(store) == ([*SHARDS, "shard-2"], [])

    # Both of shard-0's entitlements go to the least loaded others, one after the other.
    await lead(store, "shard-1", "shard-2")
    drained = await api.post("/admin/shards/shard-0/drain", headers=ADMIN)
    assert drained.status_code == 200, drained.text
    moves = {m["entitlement"]: m["to_shard"] for m in drained.json()["moves"]}
    assert moves == {"team-a": "shard-1", "team-b": "shard-2"}
    assert await mapped_to(store, "team-a") == "shard-1"
    assert await _config_shards(store) == ([*SHARDS, "shard-2"], ["shard-0"])
    assert (await shard_view(api, "shard-0"))["draining"] is True

    # A new entitlement never joins a draining shard, even an empty one.
    body = {"name": "team-c", "members": ["alice"], "quota": {"resources": {"cpu": 1000}}}
    created = await api.post("/v1/entitlements", headers=ADMIN, json=body)
    assert created.json()["shard"] != "shard-0"

    assert (await api.post("/admin/shards/shard-1/drain", headers=ADMIN)).status_code == 200
    assert_problem(await api.post("/admin/shards/shard-2/drain", headers=ADMIN), 409, "last one")
    assert_problem(await api.post("/admin/shards/shard-7/drain", headers=ADMIN), 404)
    # Adding a draining shard again opens it for new entitlements.
    assert (
        await api.post("/admin/shards", headers=ADMIN, json={"id": "shard-0"})
    ).status_code == 201
    assert await _config_shards(store) == ([*SHARDS, "shard-2"], ["shard-1"])


async def _config_shards(store: Store) -> tuple[list[str], list[str]]:
    kv = await store.get(keys.region_config())
    assert kv is not None
    config = from_json(RegionConfig, kv.value, stored=True)
    return config.shards, config.draining


async def test_a_replica_of_a_shard_not_yet_added_waits_for_it(
    region: Region, store_url: str
) -> None:
    api = region.api
    async with replicas(store_url, "shard-5") as (replica,):
        # Two of its looks at the region config (every 0.2 s) find no shard-5.
        await eventually(
            lambda: replica.membership_checks >= 2,
            what="the replica to look at the region config twice",
        )
        assert not replica.leading.is_set()
        assert await region.store.count(keys.shard_replicas("shard-5")) == 0
        added = await api.post("/admin/shards", headers=ADMIN, json={"id": "shard-5"})
        assert added.status_code == 201, added.text
        # The view, not only the replica: a lease that a loaded machine let lapse (3 s TTL)
        # moves leadership away for a moment, and the replica takes it back.
        await eventually(
            lambda: shard_view(api, "shard-5"),
            lambda view: view["leader_pid"] == os.getpid(),
            timeout_s=10,
            what="shard-5 led by this process",
        )
