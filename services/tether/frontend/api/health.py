"""/healthz and /readyz: liveness and readiness, without authentication."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.api import problems
from tether.frontend.deps import StoreDep
from tether.frontend.schemas.health import Status

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=Status)
async def healthz() -> Response:
    """The process serves requests."""
    return Status(status="ok").response()


@router.get("/readyz", response_model=Status, responses=problems(503))
async def readyz(store: StoreDep) -> Response:
    """The store answers and the region is initialised (its config exists)."""
    await records.region_config(store)
    return Status(status="ready").response()
