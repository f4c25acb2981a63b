"""Reading a round's view from the store: machines, what each holds, jobs, tasks and their
health, and open operations (the rebalancer's own moves among them)."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from pydantic import ValidationError

from tether.model import (
    FINISHED_STATES,
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

_PAGE = 10_000
_NO_STATUS: tuple[None, int] = (None, 0)
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
    task_revisions: dict[str, tuple[int, int]]
    """Task id -> the mod revisions of its record and its status (0: none): a move is proposed
    only if both are unchanged."""
    own_moves: list[OwnMove]


async def read_region(store: Store, now: datetime) -> RegionRead:
    """Everything a round plans on, read at one revision, in pages. A record that does not
    parse is skipped, with a warning: it is not the rebalancer's to repair."""
    machines_read = await _all(store, keys.MACHINES, 0)
    revision = machines_read[1]

    async def read(prefix: str) -> list[KeyValue]:
        return (await _all(store, prefix, revision))[0]

    machines = {m.id: m for m in _parsed(machines_read[0], Machine)}
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
    statuses: dict[str, tuple[TaskStatus | None, int]] = {}
    for kv in await read(keys.TASK_STATUS):
        for status in _parsed([kv], TaskStatus):
            statuses[f"{status.job}/{status.index}"] = (status, kv.mod_revision)
    tasks: dict[str, PlacedTask] = {}
    revisions: dict[str, tuple[int, int]] = {}
    down: Counter[str] = Counter()
    for kv in await read(keys.TASKS):
        for task in _parsed([kv], Task):
            job = jobs.get(task.job)
            if job is None:
                continue
            if task.machine is None or task.machine not in machines:
                if task.state not in FINISHED_STATES:
                    down[task.job] += 1
                continue
            resources = held.get(task.task_id, job.spec.task.resources)
            reported, status_revision = statuses.get(task.task_id, _NO_STATUS)
            current = current_status(task, reported)
            healthy = current is not None and current.state is TaskState.RUNNING
            tasks[task.task_id] = PlacedTask(
                task.job, task.index, task.machine, amounts(resources), task.attempt, healthy
            )
            revisions[task.task_id] = (kv.mod_revision, status_revision)
    operations: dict[str, list[TaskOperation]] = {}
    own: list[OwnMove] = []
    for kv in await read(keys.OPERATIONS):
        for operation in _parsed([kv], TaskOperation):
            if operation.state in OPEN_STATES:
                operations.setdefault(operation.job, []).append(operation)
            if operation.id.startswith(MOVE_PREFIX):
                own.append(OwnMove(kv.key, kv.mod_revision, operation))
    view = RegionView(machines, owners, jobs, tasks, operations, dict(down))
    return RegionRead(view, revision, revisions, own)


async def _all(store: Store, prefix: str, revision: int) -> tuple[list[KeyValue], int]:
    """Every key under `prefix` at `revision` (0: now), read in pages; and the revision."""
    kvs: list[KeyValue] = []
    start_after: str | None = None
    while True:
        page = await store.range(prefix, start_after=start_after, limit=_PAGE, revision=revision)
        revision = page.revision
        kvs += page.kvs
        if not page.more or not page.kvs:
            return kvs, revision
        start_after = page.kvs[-1].key


def _parsed(kvs: list[KeyValue], model: type[M]) -> list[M]:
    found: list[M] = []
    for kv in kvs:
        try:
            found.append(from_json(model, kv.value, stored=True))
        except ValidationError as error:
            _log.warning("skipping %s: not a valid %s: %s", kv.key, model.__name__, error)
    return found
