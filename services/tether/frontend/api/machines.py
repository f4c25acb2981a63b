"""/v1/machines: every machine with its state and resources."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from tether.frontend.api import AUTH_PROBLEMS
from tether.frontend.auth import CurrentPrincipal
from tether.frontend.machines import machine_views
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.machines import MachineList

router = APIRouter(prefix="/v1/machines", tags=["machines"], responses=AUTH_PROBLEMS)


@router.get("", response_model=MachineList)
async def list_machines(store: ReadsDep, principal: CurrentPrincipal) -> Response:
    """Machines by id, with capacity, allocated and free resources and heartbeat presence."""
    return MachineList(machines=await machine_views(store)).response()
