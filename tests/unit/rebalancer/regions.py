"""Small regions for the rebalancer's unit tests: machines of 4 cores and 4 GiB, one MSB each
unless told, and tasks of 1 core and 1 GiB unless told."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tests.support.allocator_builders import job, machine
from tether.model import Job, Machine, Placement, Resources, TaskOperation
from tether.rebalancer.view import PlacedTask, RegionView, amounts


@dataclass(frozen=True)
class On:
    """Task `index` of `job` on `machine`, of `cpu` millicores and `memory` MiB."""

    job: str
    index: int
    machine: str
    cpu: int = 1000
    memory: int = 1024
    healthy: bool = True


def region(
    machines: Sequence[Machine] | int,
    tasks: Sequence[On],
    *,
    placements: Mapping[str, Placement] | None = None,
    owners: Mapping[str, str | None] | None = None,
    operations: Mapping[str, list[TaskOperation]] | None = None,
) -> RegionView:
    """The machines (or that many, m0... in msb0...), the tasks, and a job per job name of
    entitlement ads with the placement given; every machine with a task belongs to ads."""
    if isinstance(machines, int):
        machines = [machine(f"m{n}", msb=f"msb{n}") for n in range(machines)]
    jobs: dict[str, Job] = {}
    for task in tasks:
        name = task.job.split("/")[1]
        if task.job not in jobs:
            count = sum(1 for t in tasks if t.job == task.job)
            placement = (placements or {}).get(name)
            jobs[task.job] = job(name, count=count, placement=placement)
    placed = {
        f"{t.job}/{t.index}": PlacedTask(
            t.job,
            t.index,
            t.machine,
            amounts(Resources(cpu=t.cpu, memory_mib=t.memory)),
            1,
            t.healthy,
        )
        for t in tasks
    }
    held = {t.machine for t in tasks}
    return RegionView(
        machines={m.id: m for m in machines},
        owners={m.id: (owners or {}).get(m.id, "ads" if m.id in held else None) for m in machines},
        jobs=jobs,
        tasks=placed,
        operations=operations or {},
    )
