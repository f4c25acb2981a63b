"""/v1/machines: every machine with its state and resources."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.api import AUTH_PROBLEMS
from tether.frontend.auth import CurrentPrincipal
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.machines import MachineList, MachineView
from tether.model import Machine
from tether.store import keys

router = APIRouter(prefix="/v1/machines", tags=["machines"], responses=AUTH_PROBLEMS)


@router.get("", response_model=MachineList)
async def list_machines(store: ReadsDep, principal: CurrentPrincipal) -> Response:
    """Machines by id, with capacity, allocated and free resources and heartbeat presence."""
    machines = await records.scan(store, keys.MACHINES, Machine)
    allocations = await records.allocations(store)
    alive = {keys.last_segment(kv.key) for kv in (await store.range(keys.HEARTBEATS)).kvs}
    views = [
        MachineView.of(
            machine, allocations.get(machine.id, records.MachineAllocation()), machine.id in alive
        )
        for machine in sorted(machines, key=lambda machine: machine.id)
    ]
    return MachineList(machines=views).response()
