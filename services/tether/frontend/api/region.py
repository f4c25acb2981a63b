"""/v1/region: the region at a glance."""

from __future__ import annotations

from collections import Counter

from fastapi import APIRouter
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.api import AUTH_PROBLEMS
from tether.frontend.auth import CurrentPrincipal
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.region import MachineCounts, RegionView, ShardView
from tether.frontend.shards import shard_members
from tether.model import AllocatorEndpoint, Machine, MachineState
from tether.store import keys

router = APIRouter(prefix="/v1/region", tags=["region"], responses=AUTH_PROBLEMS)


@router.get("", response_model=RegionView)
async def region(store: ReadsDep, principal: CurrentPrincipal) -> Response:
    """Shards with their leaders and entitlements, allocators, machines by state, the number
    of jobs and tasks by effective state."""
    config = await records.region_config(store)
    shards = [
        ShardView(
            shard=member.shard,
            leader=member.leader.identity if member.leader else None,
            leader_since=member.leader.since if member.leader else None,
            entitlements=member.entitlements,
        )
        for member in await shard_members(store, config)
    ]
    states = Counter(machine.state for machine in await records.scan(store, keys.MACHINES, Machine))
    tasks = await records.tasks_by_job(store)
    view = RegionView(
        name=config.name,
        shards=shards,
        allocators=await records.scan(store, keys.ALLOCATORS, AllocatorEndpoint),
        machines=MachineCounts(
            total=states.total(),
            up=states[MachineState.UP],
            draining=states[MachineState.DRAINING],
            maintenance=states[MachineState.MAINTENANCE],
            down=states[MachineState.DOWN],
            decommissioned=states[MachineState.DECOMMISSIONED],
        ),
        jobs=await store.count(keys.JOBS),
        tasks=records.state_counts(task.state for job in tasks.values() for task in job),
    )
    return view.response()
