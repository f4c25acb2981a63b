"""The dashboard's overview: capacity used and free per datacenter and MSB, machines by state,
shards and their leaders, the services that register, and the latest events."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final

from fastapi import APIRouter
from starlette.responses import Response

from tether.frontend import records
from tether.frontend.deps import EventsDep
from tether.frontend.events.stream import EventFilter
from tether.frontend.machines import machine_views
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.machines import MachineView
from tether.frontend.shards import shard_members
from tether.frontend.ui.render import page
from tether.frontend.ui.session import UiPrincipal
from tether.model import AllocatorEndpoint, BrokerRegistration, ShardLeader
from tether.store import keys

router = APIRouter(prefix="/ui/overview", include_in_schema=False)

RECENT_EVENTS: Final = 15


@dataclass
class Capacity:
    """What the machines of one datacenter or MSB have and what their tasks hold."""

    name: str
    machines: int = 0
    cpu: int = 0
    cpu_used: int = 0
    memory_mib: int = 0
    memory_used_mib: int = 0
    msbs: list[Capacity] = field(default_factory=list)

    def add(self, machine: MachineView) -> None:
        self.machines += 1
        self.cpu += machine.capacity.cpu
        self.cpu_used += machine.allocated.cpu
        self.memory_mib += machine.capacity.memory_mib
        self.memory_used_mib += machine.allocated.memory_mib

    @property
    def cpu_share(self) -> float:
        return self.cpu_used / self.cpu if self.cpu else 0.0

    @property
    def memory_share(self) -> float:
        return self.memory_used_mib / self.memory_mib if self.memory_mib else 0.0


def capacity(machines: list[MachineView]) -> list[Capacity]:
    """Each datacenter's capacity, with each of its MSBs', in name order."""
    datacenters: dict[str, Capacity] = {}
    msbs: dict[tuple[str, str], Capacity] = {}
    for machine in machines:
        where = machine.topology
        dc = datacenters.setdefault(where.dc, Capacity(where.dc))
        if (where.dc, where.msb) not in msbs:
            msbs[where.dc, where.msb] = Capacity(where.msb)
            dc.msbs.append(msbs[where.dc, where.msb])
        dc.add(machine)
        msbs[where.dc, where.msb].add(machine)
    for dc in datacenters.values():
        dc.msbs.sort(key=lambda msb: msb.name)
    return [datacenters[name] for name in sorted(datacenters)]


@router.get("")
async def overview_page(
    store: ReadsDep, hub: EventsDep, principal: UiPrincipal, fragment: bool = False
) -> Response:
    """The overview, or (with `fragment`) its live part alone."""
    machines = await machine_views(store)
    config = await records.region_config(store)
    recent = EventFilter(principal).events(hub, hub.recent(RECENT_EVENTS * 10))[-RECENT_EVENTS:]
    rebalancer = await records.get(store, keys.rebalancer_leader(), ShardLeader)
    return page(
        "_overview.html" if fragment else "overview.html",
        principal,
        region=config.name,
        capacity=capacity(machines),
        states=Counter(machine.state.value for machine in machines),
        shards=await shard_members(store, config),
        allocators=await records.scan(store, keys.ALLOCATORS, AllocatorEndpoint),
        brokers=await records.scan(store, keys.BROKERS, BrokerRegistration),
        rebalancer=None if rebalancer is None else rebalancer.model,
        events=list(reversed(recent)),
        following=hub.running,
    )
