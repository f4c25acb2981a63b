"""What the policies read of the cluster: the machines an entitlement reaches and how many
tasks of a size each has room for now."""

from __future__ import annotations

from collections.abc import Mapping

from tether.sdk import MachineView, TetherClient

_FIELDS = ("cpu", "memory_mib", "disk_gib", "gpus")


def reachable(client: TetherClient, entitlement: str) -> list[MachineView]:
    """Machines that are up and either the entitlement's or in the free pool, by id."""
    return sorted(
        (
            machine
            for machine in client.list_machines()
            if machine.state == "up" and machine.entitlement in (None, entitlement)
        ),
        key=lambda machine: machine.id,
    )


def tasks_that_fit(machine: MachineView, per_task: Mapping[str, int]) -> int:
    """How many tasks of `per_task` (a task's `resources`: cpu, memory_mib, disk_gib, gpus)
    the machine's free resources hold now."""
    free = machine.free.model_dump()
    counts = [free[field] // per_task[field] for field in _FIELDS if per_task.get(field, 0) > 0]
    return min(counts) if counts else 1 << 20
