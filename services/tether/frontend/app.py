"""The FastAPI application: routers, error handlers, and the store it serves from."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import httpx
from fastapi import FastAPI

from tether import __version__
from tether.frontend import allow, openapi, problems
from tether.frontend.allocators import Allocators
from tether.frontend.api import (
    accelerators,
    admin,
    drains,
    entitlements,
    events,
    health,
    hostprofiles,
    jobs,
    machines,
    maintenance,
    metrics,
    placement,
    queues,
    rebalance,
    region,
    resources,
    shards,
    tasks,
    throughput_profiles,
)
from tether.frontend.events.hub import EventHub
from tether.frontend.fastreads import FastReads, bind_fast_routes
from tether.frontend.queue_index import QueueIndex
from tether.frontend.revisions import RevisionHeaders, RevisionNoting
from tether.frontend.settings import FrontendSettings
from tether.frontend.shard_counts import ShardCounts
from tether.frontend.storewait import StoreWaitLimit
from tether.frontend.ui import pages as ui
from tether.store import Store, keys
from tether.store.cache import StoreCache
from tether.tls import http_client_options

DESCRIPTION = """Tether's REST API. Every `/v1` and `/admin` route needs
`Authorization: Bearer <token>`; errors are `application/problem+json`.
The contract is docs/protocol.md, "The frontend's REST API"."""


ROUTERS: Final = tuple(
    module.router
    for module in (
        health,
        metrics,
        entitlements,
        hostprofiles,
        throughput_profiles,
        accelerators,
        resources,
        jobs,
        queues,
        tasks,
        placement,
        machines,
        drains,
        maintenance,
        region,
        admin,
        shards,
        rebalance,
        events,
    )
)


CACHED_PREFIXES: Final = (
    keys.ADMISSIONS,
    keys.CONTROL_STATUS,
    keys.ENTITLEMENTS,
    keys.EPHEMERAL_RESOURCES,
    keys.HEARTBEATS,
    keys.HOST_PROFILES,
    keys.JOBS,
    keys.MACHINES,
    keys.MAINTENANCE,
    keys.OPERATIONS,
    keys.PRINCIPALS,
    keys.REGION,
    keys.SHARD_MAP,
    keys.THROUGHPUT_PROFILES,
)
"""What the frontend's cache holds whole: what GET requests read, but the keys of every task
(below) and the allocations and assignments (a key per task each, read only by the views of
entitlements and the region)."""

CACHED_PER_ENTITLEMENT: Final = (keys.TASKS, keys.TASK_STATUS)
"""What the frontend's cache holds one entitlement at a time, while it is read: a key per task
each, written several times as a task starts; a copy of all of them would cost each frontend
as much as a scheduler."""


def _api(**kwargs: Any) -> FastAPI:
    app = FastAPI(title="Tether", version=__version__, description=DESCRIPTION, **kwargs)
    for router in ROUTERS:
        app.include_router(router)
    return app


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document every frontend serves. It depends on the routes alone, so tests and
    tools have it without a store."""
    return openapi.document(_api())


def create_app(store: Store, settings: FrontendSettings, shard_counts: ShardCounts) -> FastAPI:
    """The REST API over `store`; the caller owns the store and closes it. `shard_counts`
    (over the same store) run while the app does."""
    # The event feed's reads belong to no request: it reads the store itself.
    event_hub = EventHub(store, keep_events=settings.events_kept, idle_s=settings.events_idle_s)
    store = RevisionNoting(store)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        allocators = Allocators(store, settings.allocator_timeout_s, settings.tls)
        app.state.allocators = allocators
        queue_index = app.state.queue_index = QueueIndex(store, settings.shard_counts_wait_s)
        await cache.start()
        await shard_counts.start()
        await queue_index.start()
        try:
            async with httpx.AsyncClient(
                timeout=settings.agent_timeout_s, **http_client_options(settings.tls)
            ) as agents:
                app.state.agents = agents
                yield
        finally:
            await event_hub.close()
            await queue_index.stop()
            await shard_counts.stop()
            await cache.stop()
            await allocators.close()

    cache = StoreCache(store, CACHED_PREFIXES, CACHED_PER_ENTITLEMENT, settings.cache_idle_s)
    app = _api(lifespan=lifespan)
    app.state.store = store
    app.state.cache = cache
    app.state.events = event_hub
    app.state.shard_counts = shard_counts
    app.state.settings = settings
    app.openapi = lambda: openapi.document(app)  # type: ignore[method-assign]
    problems.install(app)
    ui.install(app)
    # The routers' own routes: the app lists an included router as one entry.
    routes = [*app.routes, *(route for router in ROUTERS for route in router.routes)]
    allow.install(app, routes)
    app.add_middleware(FastReads, routes=bind_fast_routes(routes))
    app.add_middleware(StoreWaitLimit, seconds=settings.store_wait_s)
    app.add_middleware(RevisionHeaders)
    # Outermost: it sees the status of every answer, problems and unexpected errors included.
    app.add_middleware(metrics.RequestMetrics)
    return app
