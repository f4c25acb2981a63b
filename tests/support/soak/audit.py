"""The soak's audit once the region has settled: the store's records against each other, and the
host's task processes against the store."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field

from tests.support.faults import TaskProcess
from tether.model import Job, Machine, Resources, Task, from_json
from tether.store import keys, open_store
from tether.store.base import Store

TASK_KEYED = (keys.TASKS, keys.TASK_STATUS)
"""Prefixes whose keys are `<entitlement>/<job>/<index>`."""
MACHINE_TASK_KEYED = (keys.ASSIGNMENTS, keys.ALLOCATIONS)
"""Prefixes with `<machine>/<entitlement>/<job>/<index>` keys (allocations also hold one
`<machine>` key each, the machine's own record)."""
JOB_KEYED = (keys.OPERATIONS, keys.CONTROL_STATUS)
"""Prefixes whose keys begin with `<entitlement>/<job>`."""


@dataclass
class StoreAudit:
    overcommitted_machines: list[str] = field(default_factory=list)
    """Machines whose tasks' allocations add up to more than the machine has."""
    orphan_keys: list[str] = field(default_factory=list)
    """Keys of a job that is gone, of a task beyond its job's count, or an assignment or
    allocation on a machine its task is not on."""
    tasks: dict[str, Task] = field(default_factory=dict)
    """`<entitlement>/<job>/<index>` -> the task as the store holds it."""


def audit_store(url: str) -> StoreAudit:
    async def read() -> StoreAudit:
        async with open_store(url) as store:
            return await _audit(store)

    return asyncio.run(read())


async def _everything(store: Store, prefix: str) -> dict[str, bytes]:
    """Key (without `prefix`) -> value of every key under `prefix`, at one revision."""
    page = await store.range(prefix)
    return {kv.key.removeprefix(prefix): kv.value for kv in page.kvs}


async def _audit(store: Store) -> StoreAudit:
    jobs = {
        handle: from_json(Job, value, stored=True)
        for handle, value in (await _everything(store, keys.JOBS)).items()
    }
    audit = StoreAudit()
    audit.tasks = {
        task_id: from_json(Task, value, stored=True)
        for task_id, value in (await _everything(store, keys.TASKS)).items()
    }

    def of_a_task(task_id: str) -> bool:
        handle, _, index = task_id.rpartition("/")
        job = jobs.get(handle)
        return job is not None and int(index) < job.spec.count

    for prefix in TASK_KEYED:
        for task_id in await _everything(store, prefix):
            if not of_a_task(task_id):
                audit.orphan_keys.append(prefix + task_id)
    for prefix in JOB_KEYED:
        for key in await _everything(store, prefix):
            if "/".join(key.split("/")[:2]) not in jobs:
                audit.orphan_keys.append(prefix + key)

    machines = {
        machine_id: from_json(Machine, value, stored=True)
        for machine_id, value in (await _everything(store, keys.MACHINES)).items()
    }
    held: dict[str, Resources] = defaultdict(Resources)
    for prefix in MACHINE_TASK_KEYED:
        for key, value in (await _everything(store, prefix)).items():
            machine_id, _, task_id = key.partition("/")
            if not task_id:
                continue  # an allocation's own record
            task = audit.tasks.get(task_id)
            if not of_a_task(task_id) or task is None or task.machine != machine_id:
                audit.orphan_keys.append(prefix + key)
            elif prefix == keys.ALLOCATIONS:
                held[machine_id] += from_json(Resources, value, stored=True)
    for machine_id, resources in sorted(held.items()):
        machine = machines.get(machine_id)
        if machine is None or not resources.fits_in(machine.capacity):
            audit.overcommitted_machines.append(machine_id)
    return audit


def stray_processes(processes: list[TaskProcess], tasks: dict[str, Task]) -> list[TaskProcess]:
    """Task processes that run no task's current attempt on the task's machine."""
    stray = []
    for process in processes:
        task = tasks.get(process.task_id)
        if task is None or (task.attempt, task.machine) != (process.attempt, process.machine):
            stray.append(process)
    return stray
