"""/v1/maintenance: schedule, list, show and cancel planned maintenance of machines."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from tether.frontend import maintenance, records
from tether.frontend.api import AUTH_PROBLEMS, problems, request_body
from tether.frontend.auth import CurrentPrincipal, require_operator
from tether.frontend.bodies import parse_model, read_body
from tether.frontend.deps import SettingsDep, StoreDep
from tether.frontend.problems import NotFound
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.maintenance import (
    MaintenanceList,
    MaintenanceRequest,
    MaintenanceView,
)
from tether.model import AdvanceNotice, Identifier
from tether.store import keys

router = APIRouter(prefix="/v1/maintenance", tags=["maintenance"], responses=AUTH_PROBLEMS)

NoticeId = Annotated[Identifier, Path(description="The maintenance's id.")]


@router.post(
    "",
    status_code=201,
    response_model=MaintenanceView,
    responses=problems(400, 404, 409, 413, 422),
    openapi_extra=request_body(
        MaintenanceRequest, "Which machines, from when, for how long (operator role)."
    ),
)
async def schedule_maintenance(
    request: Request, store: StoreDep, settings: SettingsDep, principal: CurrentPrincipal
) -> Response:
    """Schedule maintenance (operator role). From now on the machines take no new tasks, and
    the jobs with tasks on them hear of it through their TaskControllers, which may move those
    tasks early; at `start` the tasks still there are moved whatever the controllers say; after
    `duration_s` the machines are up again. 409 while no broker runs for a datacenter of the
    machines: a broker carries the maintenance out."""
    require_operator(principal)
    body = await read_body(request, settings.max_body_bytes)
    wanted = parse_model(MaintenanceRequest, body, request.headers.get("content-type"))
    now = datetime.now(UTC)
    notice = await maintenance.schedule(store, wanted, now)
    headers = {"Location": f"/v1/maintenance/{notice.id}"}
    return MaintenanceView.of(notice, now).response(201, headers)


@router.get("", response_model=MaintenanceList)
async def list_maintenance(store: ReadsDep, principal: CurrentPrincipal) -> Response:
    """Maintenance scheduled or under way, soonest first."""
    views = await maintenance.maintenance_views(store, datetime.now(UTC))
    return MaintenanceList(maintenance=views).response()


@router.get("/{notice_id}", response_model=MaintenanceView, responses=problems(404))
async def get_maintenance(
    store: ReadsDep, principal: CurrentPrincipal, notice_id: NoticeId
) -> Response:
    """One maintenance."""
    found = await records.get(store, keys.maintenance(notice_id), AdvanceNotice)
    if found is None:
        raise NotFound(f"maintenance '{notice_id}' does not exist")
    return MaintenanceView.of(found.model, datetime.now(UTC)).response()


@router.delete("/{notice_id}", response_model=MaintenanceView, responses=problems(404))
async def cancel_maintenance(
    store: StoreDep, principal: CurrentPrincipal, notice_id: NoticeId
) -> Response:
    """Cancel maintenance (operator role; a drain or decommission: admin role): moves not yet
    done are withdrawn and the machines go back up at once, even in the middle of the window."""
    require_operator(principal)
    cancelled = await maintenance.cancel(store, notice_id, principal)
    return MaintenanceView.of(cancelled, datetime.now(UTC)).response()
