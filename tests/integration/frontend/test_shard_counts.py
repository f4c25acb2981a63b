"""The frontend's shard counts on a real store: they follow creates, moves and deletes in every
frontend, agree with a count from scratch after a burst and after a listing again, a shard
request reads no allocation record and counts nothing, and until the first listing is in a
request waits, then gets a 503."""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from tests.integration.frontend.conftest import (
    ADMIN,
    ALICE,
    SHARDS,
    Region,
    job_spec,
    lead,
    seed_region,
)
from tests.integration.frontend.problems import assert_problem
from tests.support.allocations import put_allocation, read_allocations
from tests.support.waiting import eventually
from tether.frontend.service import Frontend
from tether.frontend.settings import FrontendSettings
from tether.frontend.shard_counts import ShardCounts
from tether.model import Allocation, Resources, to_json
from tether.store import Delete, KeyValue, Put, RangeResult, Store, keys, open_store
from tether.store.wrapped import WrappedStore

COUNTED = (keys.SHARD_MAP, keys.JOBS, keys.TASKS, keys.OPERATIONS, keys.ALLOCATIONS)
"""The prefixes the counts follow."""
FIELDS = ("entitlements", "jobs", "tasks", "machines", "operations")
"""What GET /admin/shards says a shard holds."""
RECORD = b"{}"
"""The value of a job, task or operation written here: the counts read their keys only."""


class Observed(WrappedStore):
    """A real store that notes each read it passes on (operation, key or prefix); with `hold`
    set, listings of allocations/ wait for it."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.reads: list[tuple[str, str]] = []
        self.hold: asyncio.Event | None = None

    async def get(self, key: str) -> KeyValue | None:
        self.reads.append(("get", key))
        return await super().get(key)

    async def count(self, prefix: str) -> int:
        self.reads.append(("count", prefix))
        return await super().count(prefix)

    async def range(
        self, prefix: str, *, start_after: str | None = None, limit: int = 0, revision: int = 0
    ) -> RangeResult:
        self.reads.append(("range", prefix))
        if self.hold is not None and prefix == keys.ALLOCATIONS:
            await self.hold.wait()
        return await super().range(prefix, start_after=start_after, limit=limit, revision=revision)


@asynccontextmanager
async def frontend(
    store_url: str, hold: asyncio.Event | None = None, **settings: Any
) -> AsyncIterator[tuple[Frontend, Observed, httpx.AsyncClient]]:
    """A frontend on an observed connection of its own, and a client of it."""
    store = Observed(open_store(store_url))
    store.hold = hold
    served = Frontend(store, FrontendSettings(host="127.0.0.1", port=0, **settings))
    await served.start()
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=10) as client:
            yield served, store, client
    finally:
        await served.stop()


async def held(api: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    """What each shard holds, as GET /admin/shards answers."""
    answer = await api.get("/admin/shards", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    return {s["shard"]: {name: s[name] for name in FIELDS} for s in answer.json()["shards"]}


async def from_scratch(store: Store) -> dict[str, dict[str, Any]]:
    """What each shard of the region holds, counted as the frontend did before it kept counts:
    every allocation record read, three counts per entitlement."""
    owned = Counter(
        stored.record.entitlement
        for stored in (await read_allocations(store)).values()
        if stored.record is not None and stored.record.entitlement is not None
    )
    found: dict[str, dict[str, Any]] = {
        shard: dict.fromkeys(FIELDS, 0) | {"entitlements": []} for shard in SHARDS
    }
    for kv in (await store.range(keys.SHARD_MAP)).kvs:
        entitlement, view = keys.last_segment(kv.key), found.get(kv.value.decode())
        if view is None:
            continue
        view["entitlements"].append(entitlement)
        view["jobs"] += await store.count(keys.jobs_of(entitlement))
        view["tasks"] += await store.count(keys.tasks_of_entitlement(entitlement))
        view["operations"] += await store.count(keys.operations_of_entitlement(entitlement))
        view["machines"] += owned[entitlement]
    return found


async def settle(store: Store, counts: ShardCounts) -> None:
    """Writes under every counted prefix in one revision and waits until the counts hold it,
    and so everything written before. Only "settle" keys are added, on no shard; team-a's map
    entry is written again unchanged."""
    mapped = await store.get(keys.shard_assignment("team-a"))
    assert mapped is not None
    result = await store.txn(
        [],
        [
            Put(mapped.key, mapped.value),
            Put(keys.job("settle", "j"), RECORD),
            Put(keys.task("settle", "j", 0), RECORD),
            Put(keys.operation("settle", "j", "op"), RECORD),
            Put(keys.allocation("settle"), to_json(Allocation(machine="settle"))),
        ],
    )

    async def caught_up() -> bool:
        return all(counts.revision(prefix) >= result.revision for prefix in COUNTED)

    await eventually(caught_up, what=f"the counts at revision {result.revision}")


async def test_counts_follow_creates_moves_and_deletes_in_every_frontend(
    region: Region, store_url: str
) -> None:
    store = region.store
    await lead(store, *SHARDS)
    async with frontend(store_url) as (_, _, other):
        submitted = await region.api.post("/v1/jobs", headers=ALICE, json=job_spec("web"))
        assert submitted.status_code == 201, submitted.text
        for index in range(3):
            await store.put(keys.task("team-a", "web", index), RECORD)
        await store.put(keys.operation("team-a", "web", "restart-0"), RECORD)
        await put_allocation(
            store, Allocation(machine="m1", entitlement="team-a"), {"team-a/web/0": Resources()}
        )
        await put_allocation(store, Allocation(machine="m2", entitlement="team-b"))
        await put_allocation(store, Allocation(machine="m3"))
        created = {
            "shard-0": {
                "entitlements": ["team-a", "team-b"],
                "jobs": 1,
                "tasks": 3,
                "machines": 2,
                "operations": 1,
            },
            "shard-1": {"entitlements": [], "jobs": 0, "tasks": 0, "machines": 0, "operations": 0},
        }
        for api in (region.api, other):
            await until_held(api, created, "the creates counted")

        # The frontend that moved it answers with the move at once; the other soon after.
        move = {"entitlement": "team-a", "to": "shard-1"}
        moved = await region.api.post("/admin/shards/shard-0/move", headers=ADMIN, json=move)
        assert moved.status_code == 200, moved.text
        after_move = {
            "shard-0": {
                "entitlements": ["team-b"],
                "jobs": 0,
                "tasks": 0,
                "machines": 1,
                "operations": 0,
            },
            "shard-1": created["shard-0"] | {"entitlements": ["team-a"], "machines": 1},
        }
        assert await held(region.api) == after_move
        await until_held(other, after_move, "the move in the other frontend")

        # A job's tasks deleted in one revision, a machine back in the free pool, another
        # machine's record gone, the operation done.
        await store.txn(
            [],
            [
                Delete(keys.tasks_of("team-a", "web"), prefix=True),
                Delete(keys.operation("team-a", "web", "restart-0")),
                Put(keys.allocation("m1"), to_json(Allocation(machine="m1"))),
                Delete(keys.allocation("m2")),
            ],
        )
        after_deletes = {
            "shard-0": after_move["shard-0"] | {"machines": 0},
            "shard-1": after_move["shard-1"] | {"tasks": 0, "machines": 0, "operations": 0},
        }
        for api in (region.api, other):
            await until_held(api, after_deletes, "the deletes counted")
        assert after_deletes == await from_scratch(store)


async def until_held(
    api: httpx.AsyncClient, expected: dict[str, dict[str, Any]], what: str
) -> None:
    async def holds() -> bool:
        return await held(api) == expected

    await eventually(holds, what=what)


async def test_a_shard_request_reads_no_allocation_record_and_counts_nothing(
    store: Store, store_url: str
) -> None:
    await seed_region(store)
    await lead(store, *SHARDS)
    for index in range(20):
        machine = f"m{index}"
        tasks = {f"team-a/web/{index}": Resources(cpu=100)}
        await put_allocation(store, Allocation(machine=machine, entitlement="team-a"), tasks)
    async with frontend(store_url) as (served, observed, api):
        await served.shard_counts.tally()
        observed.reads.clear()
        listed = await held(api)
        body = {"name": "team-c", "members": ["alice"], "quota": {"resources": {"cpu": 1000}}}
        created = await api.post("/v1/entitlements", headers=ADMIN, json=body)
        assert (created.status_code, created.json()["shard"]) == (201, "shard-1")
        moved = await api.post(
            "/admin/shards/shard-0/move", headers=ADMIN, json={"entitlement": "team-b"}
        )
        assert moved.status_code == 200, moved.text
        drained = await api.post("/admin/shards/shard-1/drain", headers=ADMIN)
        assert drained.status_code == 200, drained.text
    assert listed["shard-0"]["machines"] == 20
    # The wrapper sees the requests: the shard leaders are read as before.
    assert ("range", keys.SHARD_LEADERS) in observed.reads
    counted_prefixes = (keys.ALLOCATIONS, keys.JOBS, keys.TASKS, keys.OPERATIONS)
    assert [read for read in observed.reads if read[1].startswith(counted_prefixes)] == []
    assert [read for read in observed.reads if read[0] == "count"] == []


async def test_counts_agree_with_a_count_from_scratch_after_a_burst(
    store: Store, store_url: str
) -> None:
    await seed_region(store)
    entitlements = ["team-a", "team-b", *(f"e{index}" for index in range(4))]
    for entitlement in entitlements[2:]:
        await store.put(keys.shard_assignment(entitlement), b"shard-1")
    async with frontend(store_url) as (served, _, api):
        await served.shard_counts.tally()
        await asyncio.gather(*(_burst(store, entitlements, seed) for seed in range(4)))
        await settle(store, served.shard_counts)
        assert await held(api) == await from_scratch(store)


async def _burst(store: Store, entitlements: list[str], seed: int, changes: int = 60) -> None:
    """Random creates, rewrites, deletes, owner changes and shard moves, one revision each."""
    rng = random.Random(seed)
    for _ in range(changes):
        entitlement, index = rng.choice(entitlements), rng.randrange(4)
        job = f"j{rng.randrange(2)}"
        key = rng.choice(
            (
                keys.job(entitlement, job),
                keys.task(entitlement, job, index),
                keys.operation(entitlement, job, f"op-{index}"),
            )
        )
        machine = f"m{rng.randrange(6)}"
        owner = rng.choice((*entitlements, None))
        op = rng.choice(("put", "put", "delete", "delete job", "owner", "drop machine", "move"))
        if op == "put":
            await store.put(key, RECORD)
        elif op == "delete":
            await store.txn([], [Delete(key)])
        elif op == "delete job":
            await store.txn([], [Delete(keys.tasks_of(entitlement, job), prefix=True)])
        elif op == "owner":
            tasks = {f"{owner}/{job}/{index}": Resources(cpu=1)} if owner else {}
            await put_allocation(store, Allocation(machine=machine, entitlement=owner), tasks)
        elif op == "drop machine":
            await store.txn([], [Delete(keys.allocation(machine))])
        else:
            await store.put(keys.shard_assignment(entitlement), rng.choice(SHARDS).encode())


async def test_a_listing_again_after_compaction_rebuilds_the_counts(
    store: Store, store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await seed_region(store)
    entitlements = ["team-a", "team-b"]
    await _burst(store, entitlements, seed=7, changes=30)
    async with open_store(store_url) as own:
        counts = ShardCounts(own, wait_s=5)
        await counts.start()
        try:
            await counts.tally()
            await settle(store, counts)
            assert await _tally(counts) == await from_scratch(store)
            await counts.stop()
            # Missed while stopped, and compacted away: the watches cannot resume.
            await _burst(store, entitlements, seed=8, changes=30)
            await store.put(keys.shard_assignment("team-a"), b"shard-1")
            await store.compact(await store.revision())
            with caplog.at_level(logging.INFO, logger="tether.store.feed"):
                await counts.start()
                await settle(store, counts)
            assert await _tally(counts) == await from_scratch(store)
            relisted = [
                prefix for prefix in COUNTED if f"watch on {prefix} compacted" in caplog.text
            ]
            assert relisted == list(COUNTED)
        finally:
            await counts.stop()


async def _tally(counts: ShardCounts) -> dict[str, dict[str, Any]]:
    """What each shard holds as `counts` have it, in the form GET /admin/shards answers."""
    tally = await counts.tally()
    return {
        shard: {name: getattr(tally.held(shard), name) for name in FIELDS}
        | {"entitlements": list(tally.held(shard).entitlements)}
        for shard in SHARDS
    }


async def test_until_the_first_listing_is_in_a_shard_request_waits_then_gets_a_503(
    store: Store, store_url: str
) -> None:
    await seed_region(store)
    await lead(store, *SHARDS)
    hold = asyncio.Event()
    async with frontend(store_url, hold, shard_counts_wait_s=0.5) as (_, _, api):
        # Requests that need no counts are served meanwhile.
        assert (await api.get("/v1/jobs", headers=ADMIN)).status_code == 200
        answer = await api.get("/admin/shards", headers=ADMIN)
        assert_problem(answer, 503, "still listing the store to count what each shard holds")
        assert answer.headers["retry-after"] == "1"
        body = {"name": "team-c", "members": ["alice"]}
        assert_problem(await api.post("/v1/entitlements", headers=ADMIN, json=body), 503)
        assert await store.get(keys.entitlement("team-c")) is None
        hold.set()
        assert (await held(api))["shard-0"]["entitlements"] == ["team-a", "team-b"]
