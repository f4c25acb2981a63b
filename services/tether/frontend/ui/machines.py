"""The dashboard's machines: filtered by where they are, their hardware, state and host profile;
admins drain and undrain them here."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from tether.frontend import maintenance
from tether.frontend.auth import require_admin
from tether.frontend.deps import StoreDep
from tether.frontend.machines import machine_views
from tether.frontend.problems import BadRequest, Problem
from tether.frontend.schemas.machines import MachineView
from tether.frontend.schemas.maintenance import MachineDrainRequest
from tether.frontend.ui.render import page
from tether.frontend.ui.session import UiPrincipal
from tether.model import MaintenanceKind, Name, PrincipalRecord
from tether.store import Store

router = APIRouter(prefix="/ui/machines", include_in_schema=False)

FilterQuery = Annotated[str, Query(max_length=200)]


@dataclass(frozen=True)
class MachineFilter:
    dc: str = ""
    msb: str = ""
    hardware: str = ""
    state: str = ""
    profile: str = ""

    def selects(self, machine: MachineView) -> bool:
        where = machine.topology
        return (
            (not self.dc or where.dc == self.dc)
            and (not self.msb or where.msb == self.msb)
            and (not self.hardware or machine.hardware_type == self.hardware)
            and (not self.state or machine.state.value == self.state)
            and (not self.profile or machine.host_profile_current == self.profile)
        )


async def _page(
    store: Store,
    principal: PrincipalRecord,
    wanted: MachineFilter,
    *,
    fragment: bool,
    notice: str = "",
) -> Response:
    every = await machine_views(store)
    windows = await maintenance.maintenance_views(store, datetime.now(UTC))
    return page(
        "_machines.html" if fragment else "machines.html",
        principal,
        machines=[machine for machine in every if wanted.selects(machine)],
        wanted=wanted,
        notice=notice,
        windows=windows,
        choices={
            "dc": sorted({machine.topology.dc for machine in every}),
            "msb": sorted({machine.topology.msb for machine in every}),
            "hardware": sorted({machine.hardware_type for machine in every}),
            "state": sorted({machine.state.value for machine in every}),
            "profile": sorted({m.host_profile_current for m in every if m.host_profile_current}),
        },
    )


def machine_filter(
    dc: FilterQuery = "",
    msb: FilterQuery = "",
    hardware: FilterQuery = "",
    state: FilterQuery = "",
    profile: FilterQuery = "",
) -> MachineFilter:
    return MachineFilter(dc, msb, hardware, state, profile)


FilterDep = Annotated[MachineFilter, Depends(machine_filter)]


@router.get("")
async def list_page(
    store: StoreDep, principal: UiPrincipal, wanted: FilterDep, fragment: bool = False
) -> Response:
    """The machines page, or (with `fragment`) its table alone."""
    return await _page(store, principal, wanted, fragment=fragment)


@router.post("/{machine_id}/drain")
async def drain(
    request: Request, store: StoreDep, principal: UiPrincipal, machine_id: Name, wanted: FilterDep
) -> Response:
    """Admin: drain the machine (its tasks' controllers get the default notice); answers the
    table, as filtered, with the machine's new state."""
    return await _act(request, store, principal, machine_id, wanted, drain=True)


@router.post("/{machine_id}/undrain")
async def undrain(
    request: Request, store: StoreDep, principal: UiPrincipal, machine_id: Name, wanted: FilterDep
) -> Response:
    """Admin: undo the machine's drain and decommission."""
    return await _act(request, store, principal, machine_id, wanted, drain=False)


async def _act(
    request: Request,
    store: Store,
    principal: PrincipalRecord,
    machine_id: str,
    wanted: MachineFilter,
    *,
    drain: bool,
) -> Response:
    # A form of another site cannot set this header: htmx's own is the dashboard's CSRF guard.
    if request.headers.get("HX-Request") != "true":
        raise BadRequest("the dashboard's buttons send HX-Request: true")
    require_admin(principal)
    try:
        if drain:
            kind = MaintenanceKind.DRAIN
            now = datetime.now(UTC)
            await maintenance.drain(store, machine_id, kind, MachineDrainRequest(), now)
            notice = f"{machine_id}: draining"
        else:
            await maintenance.undrain(store, machine_id)
            notice = f"{machine_id}: undrained"
    except Problem as problem:
        notice = f"{machine_id}: {problem.detail}"
    return await _page(store, principal, wanted, fragment=True, notice=notice)
