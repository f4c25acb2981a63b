"""A seeded region and a frontend serving it on loopback, for the REST API tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from tests.support.waiting import eventually
from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.frontend.service import Frontend
from tether.frontend.settings import FrontendSettings
from tether.model import (
    BrokerRegistration,
    Entitlement,
    PrincipalRecord,
    Quota,
    RegionConfig,
    Resources,
    Role,
    ShardLeader,
    to_json,
    token_digest,
)
from tether.service import HttpServer
from tether.store import Store, keys, open_store

SHARDS = ["shard-0", "shard-1"]
ADMIN = {"Authorization": "Bearer admin-token"}
ALICE = {"Authorization": "Bearer alice-token"}
"""A member of team-a."""
MALLORY = {"Authorization": "Bearer mallory-token"}
"""A member of team-b only."""
QUOTA = Resources(cpu=4000, memory_mib=8192)
"""team-a's quota."""


def job_spec(name: str = "web", count: int = 2, cpu: int = 1000, **extra: Any) -> dict[str, Any]:
    """A JobSpec body for team-a."""
    return {
        "name": name,
        "entitlement": "team-a",
        "count": count,
        "task": {
            "package": "hello",
            "version": "1.0",
            "command": "sleep",
            "args": ["600"],
            "resources": {"cpu": cpu, "memory_mib": 512},
        },
    } | extra


async def seed_region(store: Store) -> None:
    """Region config, an admin, alice (member of team-a) and mallory (member of team-b)."""
    now = datetime.now(UTC)
    await store.put(
        keys.region_config(), to_json(RegionConfig(name="test", shards=SHARDS, created_at=now))
    )
    for token, name, roles in (
        ("admin-token", "root", [Role.ADMIN]),
        ("alice-token", "alice", []),
        ("mallory-token", "mallory", []),
    ):
        await store.put(
            keys.principal(token_digest(token)), to_json(PrincipalRecord(name=name, roles=roles))
        )
    for name, member in (("team-a", "alice"), ("team-b", "mallory")):
        entitlement = Entitlement(name=name, quota=Quota(resources=QUOTA), members=[member])
        await store.put(keys.entitlement(name), to_json(entitlement))
        await store.put(keys.shard_assignment(name), b"shard-0")
    await register_broker(store, "dc1")


async def register_broker(store: Store, dc: str) -> str:
    """Registers a broker for `dc`, as a running one would (these tests run none: the frontend
    only checks that one is there before it accepts maintenance); returns its key."""
    key = keys.broker(dc, "test")
    registration = BrokerRegistration(dc=dc, pid=1, since=datetime.now(UTC))
    await store.put(key, to_json(registration))
    return key


async def lead(store: Store, *shards: str) -> None:
    """Gives each shard a leader record, as its elected scheduler replica would write it (these
    tests run no scheduler: the frontend only reads the record)."""
    for shard in shards:
        leader = ShardLeader(shard=shard, identity=f"test:{shard}", pid=1, since=datetime.now(UTC))
        await store.put(keys.shard_leader(shard), to_json(leader))


@asynccontextmanager
async def serving(
    store_url: str, settings: FrontendSettings | None = None, *, seeded_by: Store | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """A Frontend with its own store connection (by default on a free loopback port), and a
    client of it. With `seeded_by`, the test's own connection that writes records the frontend
    then shows, every GET asks for state at least as new as that store's (`min_revision`), as
    a client that wrote there would: the frontend's cache hears of a write a moment later."""
    frontend = Frontend(
        open_store(store_url), settings or FrontendSettings(host="127.0.0.1", port=0)
    )
    await frontend.start()

    async def after_seeding(request: httpx.Request) -> None:
        if seeded_by is not None and request.method == "GET":
            revision = await seeded_by.revision()
            request.url = request.url.copy_merge_params({"min_revision": revision})

    try:
        async with httpx.AsyncClient(
            base_url=frontend.url, timeout=10, event_hooks={"request": [after_seeding]}
        ) as client:
            yield client
    finally:
        await frontend.stop()


@dataclass(frozen=True)
class Region:
    store: Store
    """The test's own connection, for seeding and checking records."""
    api: httpx.AsyncClient

    async def cache_caught_up(self) -> None:
        """Returns once the frontend's cache holds every write to the store so far, for a
        client that reads without `min_revision` (the SDK)."""
        revision = await self.store.revision()

        async def cached_revision() -> int:
            # httpx's hook does not run for this client: a plain read, from the cache.
            async with httpx.AsyncClient(base_url=self.api.base_url, timeout=10) as plain:
                answer = await plain.get("/v1/jobs", headers=ADMIN)  # all from the cache
            assert answer.status_code == 200, answer.text
            return int(answer.headers["x-tether-revision"])

        await eventually(cached_revision, lambda seen: seen >= revision, what="the cache")


@pytest.fixture
async def region(store: Store, store_url: str) -> AsyncIterator[Region]:
    await seed_region(store)
    async with serving(store_url, seeded_by=store) as api:
        yield Region(store, api)


@pytest.fixture
async def machines(region: Region) -> None:
    """The machines the allocator replica finds when it starts: none (a module that needs some
    overrides this)."""


@pytest.fixture
async def allocator(region: Region, store_url: str, machines: None) -> AsyncIterator[Allocator]:
    """An allocator replica on its own store connection, started after `machines`. Its lease
    is long: no test here waits one out, and a 3 s lease lapsed on a loaded machine, leaving
    the frontend without an allocator for a moment (503)."""
    settings = AllocatorSettings(id="allocator-1", lease_ttl_s=15)
    service = Allocator(open_store(store_url), settings)
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


@asynccontextmanager
async def http_server(app: Starlette) -> AsyncIterator[str]:
    """Serves `app` on a free loopback port until the block ends; yields its base URL."""
    server = HttpServer(app, "127.0.0.1", 0, name="fake-agent", lifespan="off")
    await server.start()
    try:
        yield server.url
    finally:
        await server.stop()
