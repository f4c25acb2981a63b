"""Hand-built machines, jobs and entitlements for the allocator's tests."""

from __future__ import annotations

from datetime import UTC, datetime

from tether.model import (
    Entitlement,
    Job,
    JobSpec,
    Machine,
    MachineState,
    Placement,
    Quota,
    Resources,
    TaskTemplate,
    Topology,
)

BIG = 10**9


def machine(
    machine_id: str,
    *,
    dc: str = "dc1",
    msb: str = "msb1",
    rack: str = "r1",
    memory: int = 4096,
    cpu: int = 4000,
    state: MachineState = MachineState.UP,
    hardware: str = "std",
    attributes: dict[str, str] | None = None,
) -> Machine:
    return Machine(
        id=machine_id,
        hostname=f"{machine_id}.example",
        topology=Topology(region="r", dc=dc, msb=msb, rack=rack),
        hardware_type=hardware,
        capacity=Resources(cpu=cpu, memory_mib=memory),
        attributes=attributes or {},
        state=state,
    )


def job(
    name: str = "web",
    *,
    entitlement: str = "ads",
    count: int = 3,
    memory: int = 1024,
    cpu: int = 500,
    placement: Placement | None = None,
    generation: int = 1,
    deleting: bool = False,
) -> Job:
    now = datetime.now(UTC)
    spec = JobSpec(
        name=name,
        entitlement=entitlement,
        count=count,
        task=TaskTemplate(
            package="web",
            version="1.0",
            command="sleep",
            resources=Resources(cpu=cpu, memory_mib=memory),
        ),
        placement=placement or Placement(),
    )
    return Job(spec=spec, generation=generation, created_at=now, updated_at=now, deleting=deleting)


def entitlement(
    name: str = "ads",
    *,
    memory: int = BIG,
    cpu: int = BIG,
    allowed_dcs: list[str] | None = None,
) -> Entitlement:
    return Entitlement(
        name=name,
        quota=Quota(resources=Resources(cpu=cpu, memory_mib=memory)),
        allowed_dcs=allowed_dcs or [],
    )
