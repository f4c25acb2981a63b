"""The FastAPI application: routers, error handlers, and the store it serves from."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import httpx
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from tether import __version__
from tether.frontend import problems
from tether.frontend.allocators import Allocators
from tether.frontend.api import (
    admin,
    drains,
    entitlements,
    health,
    jobs,
    machines,
    maintenance,
    metrics,
    placement,
    region,
    shards,
    tasks,
)
from tether.frontend.schemas.maintenance import MachineDrainRequest, MaintenanceRequest
from tether.frontend.schemas.operations import OperationRequest
from tether.frontend.schemas.shards import NewShard, ShardMoveRequest
from tether.frontend.settings import FrontendSettings
from tether.frontend.storewait import StoreWaitLimit
from tether.model import Entitlement, JobSpec, PrincipalRecord
from tether.store import Store

DESCRIPTION = """Tether's REST API. Every `/v1` and `/admin` route needs
`Authorization: Bearer <token>`; errors are `application/problem+json`.
The contract is docs/protocol.md, "The frontend's REST API"."""


BODY_MODELS: Final = (
    JobSpec,
    Entitlement,
    PrincipalRecord,
    MaintenanceRequest,
    MachineDrainRequest,
    OperationRequest,
    NewShard,
    ShardMoveRequest,
)
"""Request bodies that routes validate themselves, so FastAPI does not know their schemas."""


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's OpenAPI document, plus the schemas of BODY_MODELS (cached like FastAPI's)."""
    if app.openapi_schema is None:
        document = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        _, definitions = models_json_schema(
            [(model, "validation") for model in BODY_MODELS],
            ref_template="#/components/schemas/{model}",
        )
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        for name, schema in definitions.get("$defs", {}).items():
            schemas.setdefault(name, schema)
        app.openapi_schema = document
    return app.openapi_schema


def create_app(store: Store, settings: FrontendSettings) -> FastAPI:
    """The REST API over `store`; the caller owns the store and closes it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        allocators = Allocators(store, settings.allocator_timeout_s)
        app.state.allocators = allocators
        try:
            async with httpx.AsyncClient(timeout=settings.agent_timeout_s) as agents:
                app.state.agents = agents
                yield
        finally:
            await allocators.close()

    app = FastAPI(title="Tether", version=__version__, description=DESCRIPTION, lifespan=lifespan)
    app.state.store = store
    app.state.settings = settings
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    problems.install(app)
    app.add_middleware(StoreWaitLimit, seconds=settings.store_wait_s)
    # Outermost: it sees the status of every answer, problems and unexpected errors included.
    app.add_middleware(metrics.RequestMetrics)
    for module in (
        health,
        metrics,
        entitlements,
        jobs,
        tasks,
        placement,
        machines,
        drains,
        maintenance,
        region,
        admin,
        shards,
    ):
        app.include_router(module.router)
    return app
