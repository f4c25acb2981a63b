"""/healthz and /readyz: liveness and readiness, without authentication."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.api import problems
from tether.frontend.deps import StoreDep
from tether.frontend.schemas.health import Readiness, Status
from tether.frontend.shards import shard_members, stranded

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Status)
async def healthz() -> Response:
    """The process serves requests."""
    return Status(status="ok").response()


@router.get("/readyz", response_model=Readiness, responses=problems(503))
async def readyz(store: StoreDep) -> Response:
    """The store answers and the region is initialised (its config exists). Ready, the answer
    still lists what keeps the region from scheduling some jobs: a shard that holds
    entitlements without a leader."""
    config = await records.region_config(store)
    loads = await shard_members(store, config)
    warnings = [warning for load in loads if (warning := stranded(load)) is not None]
    return Readiness(status="ready", warnings=warnings).response()
