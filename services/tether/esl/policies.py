"""The policies: each chooses machines, sets the entitlement's label on them with
`set_resource`, and returns the `resources.extra` its job's tasks ask for (None: the cluster
has no room now and nothing was set)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tether.esl.room import reachable, tasks_that_fit
from tether.sdk import MachineView, TetherClient

Extra = dict[str, int]
"""What each task asks for in `resources.extra`."""


def gang(
    client: TetherClient,
    entitlement: str,
    label: str,
    size: int,
    per_task: Mapping[str, int],
    *,
    owner_job: str | None = None,
) -> Extra | None:
    """All `size` tasks or none: the label is set, a slot per task, only once the machines'
    free resources hold every task (None, and nothing set, while they do not)."""
    machines = reachable(client, entitlement)
    return _fill(client, entitlement, label, size, per_task, machines, owner_job)


def colocate(
    client: TetherClient,
    entitlement: str,
    label: str,
    size: int,
    per_task: Mapping[str, int],
    *,
    owner_job: str | None = None,
) -> Extra | None:
    """A group of `size` tasks on one machine: the first with room for all of them."""
    for machine in reachable(client, entitlement):
        if tasks_that_fit(machine, per_task) >= size:
            client.set_resource(
                entitlement, label, size, {"machine": machine.id}, owner_job=owner_job
            )
            return {label: 1}
    return None


def anti_affinity(
    client: TetherClient, entitlement: str, label: str, *, owner_job: str | None = None
) -> Extra:
    """Never two of the tasks on one machine: one slot on every machine."""
    client.set_resource(entitlement, label, 1, None, owner_job=owner_job)
    return {label: 1}


def load_balance(
    client: TetherClient,
    entitlement: str,
    label: str,
    tasks: int,
    *,
    owner_job: str | None = None,
) -> Extra:
    """The tasks spread evenly: each machine the entitlement reaches takes at most its share
    (rounded up)."""
    machines = max(len(reachable(client, entitlement)), 1)
    client.set_resource(entitlement, label, -(-tasks // machines), None, owner_job=owner_job)
    return {label: 1}


def bin_pack(
    client: TetherClient,
    entitlement: str,
    label: str,
    tasks: int,
    per_task: Mapping[str, int],
    *,
    owner_job: str | None = None,
) -> Extra | None:
    """The tasks on as few machines as hold them: the fullest machines with room first."""
    machines = reachable(client, entitlement)
    # Fewest free slots first, so that half-used machines fill before empty ones start.
    machines.sort(key=lambda machine: tasks_that_fit(machine, per_task))
    return _fill(client, entitlement, label, tasks, per_task, machines, owner_job)


def soft_constraint(
    client: TetherClient,
    entitlement: str,
    label: str,
    tasks: int,
    per_task: Mapping[str, int],
    preferred: Sequence[Mapping[str, Any]],
    *,
    owner_job: str | None = None,
) -> Extra:
    """The tasks on machines meeting `preferred` (attribute constraints, as in a job's
    placement) when those have room for all of them, else anywhere: the fallback."""
    spec = {"constraints": [dict(constraint) for constraint in preferred]}
    client.set_resource(entitlement, label, tasks, spec, owner_job=owner_job)
    # The allocator says which machines meet the constraints; their free resources, whether
    # they hold the tasks.
    (state,) = client.get_cluster_state(entitlement, label=label)
    room = {m.id: tasks_that_fit(m, per_task) for m in reachable(client, entitlement)}
    if sum(room.get(share.machine, 0) for share in state.machines) < tasks:
        client.set_resource(entitlement, label, tasks, None, owner_job=owner_job)
    return {label: 1}


def _fill(
    client: TetherClient,
    entitlement: str,
    label: str,
    tasks: int,
    per_task: Mapping[str, int],
    machines: Sequence[MachineView],
    owner_job: str | None,
) -> Extra | None:
    """A slot per task on `machines` in their order, as many as each has room for; the label
    is set only when every task has one (None, and nothing set, otherwise)."""
    slots: dict[str, int] = {}
    for machine in machines:
        take = min(tasks_that_fit(machine, per_task), tasks - sum(slots.values()))
        if take > 0:
            slots[machine.id] = take
    if sum(slots.values()) < tasks:
        return None
    for machine_id, count in slots.items():
        client.set_resource(entitlement, label, count, {"machine": machine_id}, owner_job=owner_job)
    return {label: 1}
