"""/admin/machines/{id}: drain, decommission and undrain one machine (admin only)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Final

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from tether.frontend import maintenance
from tether.frontend.api import AUTH_PROBLEMS, problems, request_body
from tether.frontend.auth import CurrentPrincipal, require_admin
from tether.frontend.bodies import parse_model, read_body
from tether.frontend.deps import SettingsDep, StoreDep
from tether.frontend.schemas.maintenance import (
    MachineDrainRequest,
    MachineDrainView,
    MachineUndrainView,
    MaintenanceView,
)
from tether.model import MaintenanceKind, Name, PrincipalRecord

router = APIRouter(prefix="/admin/machines", tags=["admin"], responses=AUTH_PROBLEMS)

MachineId = Annotated[Name, Path(description="The machine's id.")]
_BODY = (
    'When its tasks must be off the machine, and why: {"deadline_s": 300, "reason": "..."}; '
    "both optional, the body too."
)
_HELD: Final[dict[int | str, dict[str, Any]]] = {
    200: {
        "model": MachineDrainView,
        "description": "The machine's notice already does it (`created` is false): unchanged.",
    }
}
"""A repeated drain or decommission: what holds the machine, changed in nothing."""


@router.post(
    "/{machine_id}/drain",
    status_code=201,
    response_model=MachineDrainView,
    response_description="A new notice holds the machine (`created` is true).",
    responses=_HELD | problems(400, 404, 409, 413, 422),
    openapi_extra=request_body(MachineDrainRequest, _BODY, required=False),
)
async def drain_machine(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    machine_id: MachineId,
) -> Response:
    """Admin: drain the machine. From now on it takes no new tasks (`draining`), every task on
    it gets a MOVE its controller may approve early, and at `deadline_s` the tasks still there
    are moved anyway; it stays draining until undrained. 201 with the new notice, or 200 with
    the one already draining (or decommissioning) it, unchanged; 409 while no broker runs for
    the machine's datacenter (nobody would carry it out)."""
    return await _drain(request, store, settings, principal, machine_id, MaintenanceKind.DRAIN)


@router.post(
    "/{machine_id}/decommission",
    status_code=201,
    response_model=MachineDrainView,
    response_description="A new notice holds the machine (`created` is true).",
    responses=_HELD | problems(400, 404, 409, 413, 422),
    openapi_extra=request_body(MachineDrainRequest, _BODY, required=False),
)
async def decommission_machine(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    machine_id: MachineId,
) -> Response:
    """Admin: decommission the machine. It drains like a drain until `deadline_s`, then stays
    `draining` until no task is allocated on it, and is `decommissioned` from then on: its
    allocation leaves its entitlement. 201 with the new notice, or 200 with the one already
    decommissioning it, unchanged (a drained machine can be decommissioned); 409 while no
    broker runs for the machine's datacenter."""
    return await _drain(
        request, store, settings, principal, machine_id, MaintenanceKind.DECOMMISSION
    )


@router.post("/{machine_id}/undrain", response_model=MachineUndrainView, responses=problems(404))
async def undrain_machine(
    store: StoreDep, principal: CurrentPrincipal, machine_id: MachineId
) -> Response:
    """Admin: undo the machine's drain and decommission. Their moves not yet done are withdrawn
    and the machine goes back `up` (unless planned maintenance holds it). A machine with
    neither is no error: nothing is cancelled."""
    require_admin(principal)
    cancelled = await maintenance.undrain(store, machine_id)
    now = datetime.now(UTC)
    views = [MaintenanceView.of(notice, now) for notice in cancelled]
    return MachineUndrainView(machine=machine_id, cancelled=views).response()


async def _drain(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    principal: PrincipalRecord,
    machine_id: str,
    kind: MaintenanceKind,
) -> Response:
    require_admin(principal)
    body = await read_body(request, settings.max_body_bytes)
    wanted = (
        parse_model(MachineDrainRequest, body, request.headers.get("content-type"))
        if body.strip()
        else MachineDrainRequest()
    )
    now = datetime.now(UTC)
    notice, created = await maintenance.drain(store, machine_id, kind, wanted, now)
    view = MachineDrainView(
        machine=machine_id, created=created, notice=MaintenanceView.of(notice, now)
    )
    return view.response(201 if created else 200, {"Location": f"/v1/maintenance/{notice.id}"})
