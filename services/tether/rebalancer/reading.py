"""Reading a round's view from the store: machines, what each holds, jobs, tasks and their
health, and open operations (the rebalancer's own moves among them)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from pydantic import ValidationError

from tether.model import (
    OPEN_STATES,
    Allocation,
    Job,
    Machine,
    Resources,
    Task,
    TaskOperation,
    TaskState,
    TaskStatus,
    current_status,
    from_json,
)
from tether.model.base import TetherModel
from tether.rebalancer.view import PlacedTask, RegionView, amounts
from tether.store import KeyValue, Store, keys

_log = logging.getLogger(__name__)

M = TypeVar("M", bound=TetherModel)

MOVE_PREFIX = "rebalance-"
"""The ids of the rebalancer's moves start so: it withdraws its own, and counts them."""


@dataclass(frozen=True, slots=True)
class OwnMove:
    """A move the rebalancer proposed, as stored."""

    key: str
    revision: int
    operation: TaskOperation


@dataclass(frozen=True, slots=True)
class RegionRead:
    """The round's view, and what proposing and withdrawing moves compare against."""

    view: RegionView
    revision: int
    task_revisions: dict[str, int]
    """Task id -> the mod revision of its record: a move is proposed only if it is unchanged."""
    own_moves: list[OwnMove]


async def read_region(store: Store, now: datetime) -> RegionRead:
    """Everything a round plans on, read at one revision. A record that does not parse is
    skipped, with a warning: it is not the rebalancer's to repair."""
    machines_read = await store.range(keys.MACHINES)
    revision = machines_read.revision

    async def read(prefix: str) -> list[KeyValue]:
        return (await store.range(prefix, revision=revision)).kvs

    machines = {m.id: m for m in _parsed(machines_read.kvs, Machine)}
    owners: dict[str, str | None] = dict.fromkeys(machines)
    held: dict[str, Resources] = {}
    for kv in await read(keys.ALLOCATIONS):
        machine, task_id = keys.split_allocation(kv.key)
        if task_id is None:
            for allocation in _parsed([kv], Allocation):
                if machine in owners:
                    owners[machine] = allocation.entitlement
        else:
            for resources in _parsed([kv], Resources):
                held[task_id] = resources
    jobs = {job.handle: job for job in _parsed(await read(keys.JOBS), Job)}
    statuses = {f"{s.job}/{s.index}": s for s in _parsed(await read(keys.TASK_STATUS), TaskStatus)}
    tasks: dict[str, PlacedTask] = {}
    task_revisions: dict[str, int] = {}
    for kv in await read(keys.TASKS):
        for task in _parsed([kv], Task):
            job = jobs.get(task.job)
            if task.machine is None or job is None:
                continue
            resources = held.get(task.task_id, job.spec.task.resources)
            current = current_status(task, statuses.get(task.task_id))
            healthy = current is not None and current.state is TaskState.RUNNING
            tasks[task.task_id] = PlacedTask(
                task.job, task.index, task.machine, amounts(resources), task.attempt, healthy
            )
            task_revisions[task.task_id] = kv.mod_revision
    operations: dict[str, list[TaskOperation]] = {}
    own: list[OwnMove] = []
    for kv in await read(keys.OPERATIONS):
        for operation in _parsed([kv], TaskOperation):
            if operation.state in OPEN_STATES:
                operations.setdefault(operation.job, []).append(operation)
            if operation.id.startswith(MOVE_PREFIX):
                own.append(OwnMove(kv.key, kv.mod_revision, operation))
    view = RegionView(machines, owners, jobs, tasks, operations, now)
    return RegionRead(view, revision, task_revisions, own)


def _parsed(kvs: list[KeyValue], model: type[M]) -> list[M]:
    found: list[M] = []
    for kv in kvs:
        try:
            found.append(from_json(model, kv.value, stored=True))
        except ValidationError as error:
            _log.warning("skipping %s: not a valid %s: %s", kv.key, model.__name__, error)
    return found
