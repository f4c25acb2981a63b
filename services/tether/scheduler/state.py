"""The leader's in-memory view of the store: mirrors of its prefixes, parsed and indexed by job."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from tether.aio import cancel_and_wait
from tether.model import (
    DEFAULT_GRACE_S,
    AdvanceNotice,
    ControllerRegistration,
    Entitlement,
    Job,
    Machine,
    MachineState,
    Task,
    TaskOperation,
    TaskStatus,
    parse_job_handle,
)
from tether.model.admission import Admission
from tether.scheduler.admission.holding import holding_inputs
from tether.scheduler.plan import JobView, Stored
from tether.scheduler.records import PartitionedRecords, Records, parser, records_of
from tether.store import Get, Store, StoreError, keys

_log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

Mark = Callable[[str, int | None], None]
"""Called with a job's handle and the index of its task whose record or status changed, or
None when the change may concern the whole job (its record, admission, operations, machines)."""

_RETRY_S = 1.0


def _file(grouped: defaultdict[str, dict[K, V]], group: str, key: K, value: V | None) -> None:
    """Sets `key` in one group of a grouped index (by job, by registration scope), or drops it
    (and the group, once empty)."""
    if value is None:
        grouped[group].pop(key, None)
        if not grouped[group]:
            del grouped[group]
    else:
        grouped[group][key] = value


def tree_root(name: str, entitlements: Mapping[str, Entitlement]) -> str | None:
    """The root of the entitlement's tree; None for one in a cycle of parents (a record written
    before the frontend checked for them)."""
    seen = {name}
    current = entitlements[name]
    while current.parent is not None and current.parent in entitlements:
        if current.parent in seen:
            _log.warning("entitlement %s is in a cycle of parents; not deciding for it", name)
            return None
        seen.add(current.parent)
        current = entitlements[current.parent]
    return current.name


def _scope(registration: ControllerRegistration) -> str:
    """What a registration decides for: its job's handle, else its entitlement's name."""
    return registration.job if registration.job is not None else registration.entitlement


def _ignore(key: str, old: Stored[str] | None, new: Stored[str] | None) -> None:
    """Ledgers are only read (before each admission decision), never acted on."""


def _only_progress(old: TaskStatus, new: TaskStatus) -> bool:
    """Whether a status change reports steps and nothing a plan reads: a training task's
    progress need not reconcile its job every few seconds."""
    ignored = {"progress", "updated_at"}
    return old.model_dump(exclude=ignored) == new.model_dump(exclude=ignored)


def _shard_id(value: bytes) -> str:
    return value.decode().strip()


class ShardState:
    """Mirrors of `shards/map/`, `entitlements/`, `jobs/`, `admissions/`, `machines/`,
    `operations/`, `taskcontrollers/`, `maintenance/` and `quota-ledgers/`, and of the `tasks/`
    and `task-status/` of the entitlements it follows: those of this shard, and of the trees
    rooted here (their admissions are decided here). Calls `mark(job handle, task index or
    None)` for every job a change may concern, `holding_changed(job handle)` when what the
    job's queue entry reads changed (its record, admission, or a task's `holding_inputs`), and
    `reshaped()` when the entitlements or the shard map change."""

    def __init__(
        self,
        store: Store,
        shard: str,
        mark: Mark,
        *,
        fencing_s: float,
        reshaped: Callable[[], None] = lambda: None,
        holding_changed: Callable[[str], None] = lambda handle: None,
    ) -> None:
        self._store = store
        self.shard = shard
        self._mark = mark
        self._reshaped = reshaped
        self._holding_changed = holding_changed
        self._fencing_s = fencing_s
        self.shard_map = Records(store, keys.SHARD_MAP, _shard_id, self._shard_map_changed)
        self.entitlements = Records(
            store, keys.ENTITLEMENTS, parser(Entitlement), self._entitlement_changed
        )
        self.jobs = Records(store, keys.JOBS, parser(Job), self._job_changed)
        self.admissions = Records(
            store, keys.ADMISSIONS, parser(Admission), self._admission_changed
        )
        self.ledgers = Records(store, keys.QUOTA_LEDGERS, bytes.decode, _ignore)
        self.tasks = PartitionedRecords(store, keys.TASKS, parser(Task), self._task_changed)
        self.statuses = PartitionedRecords(
            store, keys.TASK_STATUS, parser(TaskStatus), self._status_changed
        )
        self._interest_changed = asyncio.Event()
        self._following: asyncio.Task[None] | None = None
        self.machines_records = Records(
            store, keys.MACHINES, parser(Machine), self._machine_changed
        )
        self.operations = Records(
            store, keys.OPERATIONS, parser(TaskOperation), self._operation_changed
        )
        self.controllers = Records(
            store, keys.CONTROLLERS, parser(ControllerRegistration), self._controller_changed
        )
        self.notices = Records(store, keys.MAINTENANCE, parser(AdvanceNotice), self._notice_changed)
        self.machines: dict[str, Machine] = {}
        # machine id -> its advance notices, soonest first.
        self.maintenance: dict[str, list[AdvanceNotice]] = {}
        self._operations: defaultdict[str, dict[str, Stored[TaskOperation]]] = defaultdict(dict)
        self._tasks: defaultdict[str, dict[int, Stored[Task]]] = defaultdict(dict)
        self._statuses: defaultdict[str, dict[int, TaskStatus]] = defaultdict(dict)
        # Scope (a job handle, or an entitlement name: names have no "/") -> registration key ->
        # registration, so that finding a job's controller does not scan every registration.
        self._registrations: defaultdict[str, dict[str, Stored[ControllerRegistration]]] = (
            defaultdict(dict)
        )
        # machine id -> job handle -> how many of the job's tasks are on it.
        self._on_machine: defaultdict[str, defaultdict[str, int]] = defaultdict(
            lambda: defaultdict(int)
        )

    def _all(self) -> list[Records[Any]]:
        return [
            self.shard_map,
            self.entitlements,
            self.jobs,
            self.admissions,
            self.ledgers,
            self.machines_records,
            self.operations,
            self.controllers,
            self.notices,
        ]

    async def start(self) -> None:
        """Loads every mirror; returns once all of them hold a snapshot."""
        for records in self._all():
            await records.start()
        await self._follow_interest()
        self._following = asyncio.create_task(self._keep_following(), name="shard interest")

    async def stop(self) -> None:
        await cancel_and_wait(self._following)
        for records in self._all():
            await records.stop()
        await self.tasks.stop()
        await self.statuses.stop()

    def trees(self) -> dict[str, str]:
        """Entitlement -> its tree's root, for the trees rooted on this shard."""
        every = {stored.value.name: stored.value for stored in self.entitlements.items.values()}
        return {
            name: root
            for name in every
            if (root := tree_root(name, every)) is not None and self.owned_at(root) is not None
        }

    def _interest(self) -> set[str]:
        """The entitlements whose tasks and statuses this leader follows: its own, and those of
        the trees it decides admissions for (an admin may move one member elsewhere)."""
        owned = {
            keys.last_segment(key)
            for key, stored in self.shard_map.items.items()
            if stored.value == self.shard
        }
        return owned | self.trees().keys()

    async def _follow_interest(self) -> None:
        interest = self._interest()
        added = await self.tasks.follow(interest) | await self.statuses.follow(interest)
        # Planned whole: a mark of the job may have found its records not loaded yet.
        for entitlement in added:
            self._mark_jobs_of(entitlement)

    def _loaded(self, entitlement: str) -> bool:
        """Whether the entitlement's tasks and statuses are both followed: a plan from tasks
        without their statuses would take healthy tasks for silent ones (and, say, stop one
        without asking its controller)."""
        return self.tasks.follows(entitlement) and self.statuses.follows(entitlement)

    async def _keep_following(self) -> None:
        """Follows the tasks and statuses of what the shard map and the trees make ours."""
        while True:
            await self._interest_changed.wait()
            self._interest_changed.clear()
            try:
                await self._follow_interest()
            except StoreError as error:
                _log.warning("following this shard's entitlements failed, retrying: %s", error)
                self._interest_changed.set()
                await asyncio.sleep(_RETRY_S)

    def owns(self, handle: str) -> bool:
        """Whether the job's entitlement maps to this shard."""
        entitlement, _ = parse_job_handle(handle)
        return self.owned_at(entitlement) is not None

    def owned_at(self, entitlement: str) -> int | None:
        """The revision of the entitlement's shard-map entry if it maps to this shard: the
        executor's writes for its jobs hold only while the entry is unchanged."""
        stored = self.shard_map.items.get(keys.shard_assignment(entitlement))
        return stored.revision if stored is not None and stored.value == self.shard else None

    def handles(self) -> Iterator[str]:
        """Every job of this shard."""
        return (handle for handle, _ in self.sized_handles())

    def sized_handles(self) -> Iterator[tuple[str, int]]:
        """Every job of this shard, with the count of tasks it asks for."""
        for stored in list(self.jobs.items.values()):
            if self.owns(stored.value.handle):
                yield stored.value.handle, stored.value.spec.count

    def view(self, handle: str) -> JobView | None:
        """A snapshot of one job's records, or None if the job is gone or not this shard's."""
        entitlement, name = parse_job_handle(handle)
        job = self.jobs.items.get(keys.job(entitlement, name))
        if job is None or not self.owns(handle) or not self._loaded(entitlement):
            # Not ours, or its records are still loading: it is marked again once they are.
            return None
        record = self.entitlement(entitlement)
        return JobView(
            job=job,
            tasks=dict(self._tasks.get(handle, {})),
            statuses=dict(self._statuses.get(handle, {})),
            machines=self.machines,
            machines_revision=self.machines_records.mirror.revision,
            revision=self.tasks.revision(entitlement),
            operations=dict(self._operations.get(handle, {})),
            controlled=self.controller_for(handle) is not None,
            maintenance=self.maintenance,
            fencing_s=self._fencing_s,
            admission=self.admission_of(handle),
            preempt_grace_s=DEFAULT_GRACE_S if record is None else record.preemption.grace_s,
        )

    def admission_of(self, handle: str) -> Admission | None:
        entitlement, name = parse_job_handle(handle)
        stored = self.admissions.items.get(keys.admission(entitlement, name))
        return None if stored is None else stored.value

    def entitlement(self, name: str) -> Entitlement | None:
        stored = self.entitlements.items.get(keys.entitlement(name))
        return None if stored is None else stored.value

    def tasks_of(self, handle: str) -> dict[int, Stored[Task]]:
        return self._tasks.get(handle, {})

    async def consistent_view(self, handle: str) -> JobView | None:
        """The job's view with its tasks, statuses and operations read from the store at one
        revision. The mirrors follow separate watches, so a view built from them may hold an
        operation done without the new attempt it made; a TaskController must never be told
        that a task it let go down is still up."""
        view = self.view(handle)
        if view is None:
            return None
        entitlement, name = parse_job_handle(handle)
        prefixes = (
            keys.tasks_of(entitlement, name),
            keys.statuses_of(entitlement, name),
            keys.operations_of(entitlement, name),
        )
        result = await self._store.txn([], [Get(prefix, prefix=True) for prefix in prefixes])
        tasks, statuses, operations = (result.kvs(position) for position in range(3))
        return replace(
            view,
            tasks={stored.value.index: stored for stored in records_of(tasks, parser(Task))},
            statuses={
                stored.value.index: stored.value
                for stored in records_of(statuses, parser(TaskStatus))
            },
            operations={
                stored.value.id: stored for stored in records_of(operations, parser(TaskOperation))
            },
            revision=result.revision,
        )

    def controller_for(self, handle: str) -> ControllerRegistration | None:
        """The job's TaskController: one registered for the job, else for its entitlement
        (the newest registration of either, when several compete)."""
        entitlement, _ = parse_job_handle(handle)
        for scope in (handle, entitlement):
            registered = self._registrations.get(scope)
            if registered:
                return max(registered.values(), key=lambda stored: stored.revision).value
        return None

    # --- indexes and dirty marking ---------------------------------------------------------

    def _shard_map_changed(
        self, key: str, old: Stored[str] | None, new: Stored[str] | None
    ) -> None:
        self._mark_jobs_of(keys.last_segment(key))
        self._interest_changed.set()
        self._reshaped()

    def _entitlement_changed(
        self, key: str, old: Stored[Entitlement] | None, new: Stored[Entitlement] | None
    ) -> None:
        self._interest_changed.set()
        self._reshaped()

    def _admission_changed(
        self, key: str, old: Stored[Admission] | None, new: Stored[Admission] | None
    ) -> None:
        handle = key.removeprefix(keys.ADMISSIONS)
        self._mark(handle, None)
        self._holding_changed(handle)

    def _mark_jobs_of(self, entitlement: str) -> None:
        prefix = keys.jobs_of(entitlement)
        for job_key, stored in list(self.jobs.items.items()):
            if job_key.startswith(prefix):
                self._mark(stored.value.handle, None)

    def _job_changed(self, key: str, old: Stored[Job] | None, new: Stored[Job] | None) -> None:
        handle = key.removeprefix(keys.JOBS)
        self._mark(handle, None)
        self._holding_changed(handle)

    def _task_changed(self, key: str, old: Stored[Task] | None, new: Stored[Task] | None) -> None:
        entitlement, name, index = keys.task_of_key(key)
        handle = f"{entitlement}/{name}"
        if old is not None and old.value.machine is not None:
            self._leave(old.value.machine, handle)
        _file(self._tasks, handle, index, new)
        if new is not None and new.value.machine is not None:
            self._on_machine[new.value.machine][handle] += 1
        self._mark(handle, index)
        if holding_inputs(old) != holding_inputs(new):
            self._holding_changed(handle)

    def _leave(self, machine: str, handle: str) -> None:
        jobs = self._on_machine[machine]
        jobs[handle] -= 1
        if jobs[handle] <= 0:
            del jobs[handle]
        if not jobs:
            del self._on_machine[machine]

    def _status_changed(
        self, key: str, old: Stored[TaskStatus] | None, new: Stored[TaskStatus] | None
    ) -> None:
        entitlement, name, index = keys.task_of_key(key)
        handle = f"{entitlement}/{name}"
        _file(self._statuses, handle, index, None if new is None else new.value)
        if old is None or new is None or not _only_progress(old.value, new.value):
            self._mark(handle, index)

    def _operation_changed(
        self, key: str, old: Stored[TaskOperation] | None, new: Stored[TaskOperation] | None
    ) -> None:
        entitlement, name, operation_id = key.rsplit("/", 3)[-3:]
        handle = f"{entitlement}/{name}"
        _file(self._operations, handle, operation_id, new)
        self._mark(handle, None)

    def _controller_changed(
        self,
        key: str,
        old: Stored[ControllerRegistration] | None,
        new: Stored[ControllerRegistration] | None,
    ) -> None:
        if old is not None:
            _file(self._registrations, _scope(old.value), key, None)
        if new is not None:
            _file(self._registrations, _scope(new.value), key, new)
        for stored in (old, new):
            if stored is None:
                continue
            registration = stored.value
            if registration.job is not None:
                self._mark(registration.job, None)
            else:
                self._mark_jobs_of(registration.entitlement)

    def _notice_changed(
        self, key: str, old: Stored[AdvanceNotice] | None, new: Stored[AdvanceNotice] | None
    ) -> None:
        notice_id = keys.last_segment(key)
        for stored in (old, new):
            if stored is None:
                continue
            for machine_id in stored.value.machines:
                notices = [n for n in self.maintenance.get(machine_id, []) if n.id != notice_id]
                if new is not None and machine_id in new.value.machines:
                    notices.append(new.value)
                    notices.sort(key=lambda notice: (notice.start, notice.id))
                if notices:
                    self.maintenance[machine_id] = notices
                else:
                    self.maintenance.pop(machine_id, None)
                for handle in list(self._on_machine.get(machine_id, {})):
                    self._mark(handle, None)

    def _machine_changed(
        self, key: str, old: Stored[Machine] | None, new: Stored[Machine] | None
    ) -> None:
        machine_id = keys.last_segment(key)
        if new is None:
            self.machines.pop(machine_id, None)
        else:
            self.machines[machine_id] = new.value
        # Inventory updates (capacity, labels) change nothing for tasks already placed.
        was_down = old is None or old.value.state is MachineState.DOWN
        is_down = new is None or new.value.state is MachineState.DOWN
        if was_down != is_down:
            for handle in list(self._on_machine.get(machine_id, {})):
                self._mark(handle, None)
