"""Machine views: inventory, state, what its allocation record says and what its tasks hold."""

from __future__ import annotations

from tether.frontend.records import MachineAllocation
from tether.frontend.schemas import View
from tether.model import Machine, MachineState, Resources, Topology


class MachineView(View):
    """A machine with its capacity, the resources its tasks hold and what is left."""

    id: str
    hostname: str
    topology: Topology
    hardware_type: str
    attributes: dict[str, str]
    """Its labels, which job constraints match (`gpu_type`, say)."""
    state: MachineState
    entitlement: str | None
    """The entitlement that owns the machine (its allocation record); None: the free pool."""
    host_profile: str | None
    """The host profile the machine should carry (its allocation record)."""
    host_profile_current: str | None
    """The host profile its agent last finished switching to."""
    capacity: Resources
    allocated: Resources
    free: Resources
    """Capacity minus allocated; nothing at all when a lowered capacity is over-committed."""
    tasks: int
    """How many tasks hold resources on it."""
    heartbeat: bool
    """Whether its agent's heartbeat key is present."""

    @classmethod
    def of(cls, machine: Machine, allocation: MachineAllocation, heartbeat: bool) -> MachineView:
        record = allocation.record
        allocated = allocation.used()
        fits = allocated.fits_in(machine.capacity)
        return cls(
            id=machine.id,
            hostname=machine.hostname,
            topology=machine.topology,
            hardware_type=machine.hardware_type,
            attributes=dict(machine.attributes),
            state=machine.state,
            entitlement=record.entitlement if record else None,
            host_profile=record.host_profile if record else None,
            host_profile_current=machine.host_profile_current,
            capacity=machine.capacity,
            allocated=allocated,
            free=machine.capacity - allocated if fits else Resources(),
            tasks=len(allocation.tasks),
            heartbeat=heartbeat,
        )


class MachineList(View):
    machines: list[MachineView]
