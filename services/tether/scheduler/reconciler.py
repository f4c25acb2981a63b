"""What the leader does to one job, decided from its records alone (no I/O, so it is testable)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Final, Generic, TypeVar

from tether.model import (
    DEFAULT_FENCING_S,
    DEFAULT_GRACE_S,
    OPEN_STATES,
    TERMINAL_STATES,
    AdvanceNotice,
    Assignment,
    DesiredState,
    Job,
    JobKind,
    Machine,
    MachineState,
    OperationKind,
    OperationState,
    RestartMode,
    RestartPolicy,
    Task,
    TaskOperation,
    TaskState,
    TaskStatus,
    current_status,
)
from tether.model.admission import Admission

T = TypeVar("T")

FINISHED: Final = frozenset({TaskState.EXITED, TaskState.FAILED, TaskState.KILLED})
"""Statuses after which the agent runs nothing for that attempt any more."""
FENCE_MARGIN_S: Final = 2.0
"""Added to the fencing period before an at-most-once task of a down machine runs elsewhere:
for the clocks of the health checker's and the scheduler's hosts, and the agent's poll."""


@dataclass(frozen=True, slots=True)
class Stored(Generic[T]):
    """A record and the mod revision of its key, which writes compare against."""

    value: T
    revision: int


@dataclass(frozen=True, slots=True)
class JobView:
    """Everything the leader knows about one job: its record, tasks, statuses (by index) and
    the region's machines (by id)."""

    job: Stored[Job]
    tasks: Mapping[int, Stored[Task]]
    statuses: Mapping[int, TaskStatus]
    machines: Mapping[str, Machine]
    machines_revision: int
    """The store revision `machines` is at: a machine missing from it is gone only if the task
    naming it is older (the allocator may use a machine the leader has not heard of yet)."""
    revision: int = 0
    """A store revision the view's tasks are at least as new as: every task key deleted up to
    here is already absent from `tasks`."""
    operations: Mapping[str, Stored[TaskOperation]] = field(default_factory=dict)
    """The job's task operations, by id."""
    controlled: bool = False
    """The job has a TaskController registered: shrinking it waits for STOP approvals."""
    maintenance: Mapping[str, Sequence[AdvanceNotice]] = field(default_factory=dict)
    """Machine id -> its scheduled maintenance, soonest first (region-wide: shared by every
    view, not copied)."""
    fencing_s: float = DEFAULT_FENCING_S
    """The region's fencing period (`RegionConfig.fencing_s`)."""
    admission: Admission | None = None
    """What the job's entitlement tree's decider granted it; None for a job older than
    admission records, which runs all its tasks."""
    preempt_grace_s: float = DEFAULT_GRACE_S
    """Its entitlement's grace between a PREEMPT notice and the stop."""

    @property
    def live_count(self) -> int:
        """How many of its tasks should run: its count, at most what it is admitted."""
        count = self.job.value.spec.count
        return count if self.admission is None else min(count, self.admission.admitted)


@dataclass(frozen=True, slots=True)
class OperationWrite:
    """An operation's new record, written only if its key is still at `revision` (0: new)."""

    operation: TaskOperation
    revision: int


@dataclass(frozen=True, slots=True)
class TaskWrite:
    """One task's new record (None: delete the task and its status) with its assignment changes,
    written only if the task key is still at `revision` (0: the task must not exist yet)."""

    index: int
    revision: int
    task: Task | None
    assignment: tuple[str, Assignment] | None = None
    """(machine, assignment) to put."""
    unassign: str | None = None
    """The machine whose assignment of this task is deleted."""
    operation: OperationWrite | None = None
    """The operation this write executes, marked done in the same transaction."""
    silent: str | None = None
    """A machine whose heartbeat must still be missing for the write to apply: an agent that
    came back may already have taken up the task again."""


@dataclass(slots=True)
class Plan:
    """The actions for one job, executed in this order."""

    reclaim: list[TaskWrite] = field(default_factory=list)
    """At-most-once tasks taken off a silent machine: written first (each only while the
    machine's heartbeat is still missing), then released with `Allocator.Release`."""
    release: list[TaskWrite] = field(default_factory=list)
    """Written after `Allocator.Release` has freed these tasks' machines."""
    writes: list[TaskWrite] = field(default_factory=list)
    place: list[int] = field(default_factory=list)
    """Indexes of tasks without a machine to ask `Allocator.Place` for."""
    operations: list[OperationWrite] = field(default_factory=list)
    """Operations proposed or withdrawn (executed ones go with their task's write)."""
    delete_job: bool = False
    """The job is deleting and has no task left: delete its key."""
    wake_at: datetime | None = None
    """When a restart backoff ends: reconcile the job again then."""

    def wake(self, at: datetime) -> None:
        self.wake_at = at if self.wake_at is None else min(self.wake_at, at)


def plan_job(view: JobView, now: datetime) -> Plan:
    """Decides what to do about one job, per docs/protocol.md ("The scheduler leader's loop")."""
    job = view.job.value
    plan = Plan()
    if not job.deleting:
        for index in range(view.live_count):
            if index not in view.tasks:
                plan.writes.append(TaskWrite(index, 0, _new_task(job, index, view.revision, now)))
    for index, stored in sorted(view.tasks.items()):
        _plan_task(view, stored, current_status(stored.value, view.statuses.get(index)), now, plan)
    _plan_operations(view, now, plan)
    plan.delete_job = job.deleting and not view.tasks
    return plan


def update_id(version: str, index: int) -> str:
    """The id of the operation that updates task `index` to `version`: the same on every
    reconcile, so an operation is proposed once."""
    return f"update-{hashlib.sha256(version.encode()).hexdigest()[:12]}-t{index}"


def is_healthy(task: Task, status: TaskStatus | None) -> bool:
    """Whether the task runs its current attempt on its machine."""
    current = current_status(task, status)
    return current is not None and current.state is TaskState.RUNNING


def _plan_operations(view: JobView, now: datetime, plan: Plan) -> None:
    """Proposes the operations the job's tasks need (updates to the job's version, moves off
    machines with maintenance ahead, stops of tasks a shrink removes from a job with a
    controller), executes the approved ones and those whose deadline has
    come, and withdraws the ones that no longer apply.

    A task this plan already writes is left alone: its next reconcile decides on its new record.
    At most one operation per task executes in a plan, since each makes a new attempt.
    """
    touched = {write.index for write in (*plan.reclaim, *plan.release, *plan.writes)}
    open_by_task: dict[int, list[Stored[TaskOperation]]] = {}
    for stored in sorted(view.operations.values(), key=lambda s: (s.value.created_at, s.value.id)):
        if stored.value.state in OPEN_STATES:
            for index in stored.value.tasks:
                open_by_task.setdefault(index, []).append(stored)
    for index, stored_task in sorted(view.tasks.items()):
        open_operations = open_by_task.pop(index, [])
        if index in touched:
            continue
        proposals = {op.id: op for op in _proposals(view, stored_task, now)}
        executed = False
        for stored in open_operations:
            operation = stored.value
            if not _applies(view, stored_task, operation, now):
                plan.operations.append(_withdrawn(stored, now))
                continue
            proposals.pop(operation.id, None)
            if not executed and _due(operation, now):
                _execute(view, stored_task, stored, now, plan)
                executed = True
            elif operation.deadline is not None:
                plan.wake(operation.deadline)
        for proposal in proposals.values():
            if not executed and _due(proposal, now):
                # Its deadline has passed already: there is no time left to ask anyone.
                _execute(view, stored_task, Stored(proposal, 0), now, plan)
                executed = True
                continue
            plan.operations.append(OperationWrite(proposal, 0))
            if proposal.deadline is not None:
                plan.wake(proposal.deadline)
    # Operations of tasks that are gone.
    for stale in open_by_task.values():
        plan.operations += [_withdrawn(operation, now) for operation in stale]


def _due(operation: TaskOperation, now: datetime) -> bool:
    """Approved, or its deadline has come whatever the controller says."""
    if operation.state is OperationState.APPROVED:
        return True
    return operation.deadline is not None and now >= operation.deadline


def maintenance_id(notice: AdvanceNotice, index: int, attempt: int) -> str:
    """The id of the move of task `index` (at `attempt`) off a machine under `notice`."""
    digest = hashlib.sha256(f"{notice.id}/{attempt}".encode()).hexdigest()[:12]
    return f"maintenance-{digest}-t{index}"


def next_maintenance(view: JobView, machine: str | None, now: datetime) -> AdvanceNotice | None:
    """The machine's maintenance that is not over yet and starts first."""
    if machine is None:
        return None
    return next((n for n in view.maintenance.get(machine, ()) if now < n.end), None)


def awaits_stop(view: JobView, stored_task: Stored[Task]) -> bool:
    """Whether the task, healthy and removed by a shrink of a job with a TaskController, stops
    only once its STOP operation is approved (the controller may first move its work away, as a
    shard manager moves shards). Deleting a job, and shrinking one without a controller, stop
    tasks at once."""
    job, task = view.job.value, stored_task.value
    return (
        view.controlled
        and not job.deleting
        and task.index >= job.spec.count
        and task.desired is DesiredState.RUNNING
        and is_healthy(task, view.statuses.get(task.index))
    )


def awaits_preempt(view: JobView, stored_task: Stored[Task]) -> bool:
    """Whether the task, healthy and beyond what its job is admitted now (it was preempted),
    stops only once its PREEMPT operation is approved or its grace period is over."""
    job, task = view.job.value, stored_task.value
    return (
        view.admission is not None
        and not job.deleting
        and view.live_count <= task.index < job.spec.count
        and task.desired is DesiredState.RUNNING
        and is_healthy(task, view.statuses.get(task.index))
    )


def _is_live(view: JobView, task: Task) -> bool:
    """The task belongs to the job as it is now (not deleting, index within what runs)."""
    job = view.job.value
    return not job.deleting and task.index < view.live_count


def _proposal(
    task: Task, kind: OperationKind, operation_id: str, reason: str, now: datetime, **fields: Any
) -> TaskOperation:
    """A new operation of `kind` on one task, waiting for approval."""
    return TaskOperation(
        id=operation_id,
        kind=kind,
        job=task.job,
        tasks=[task.index],
        reason=reason,
        created_at=now,
        updated_at=now,
        **fields,
    )


def _proposals(view: JobView, stored_task: Stored[Task], now: datetime) -> list[TaskOperation]:
    """The operations the task needs now; each id is stable, so a need is proposed once."""
    job, task = view.job.value, stored_task.value
    if awaits_stop(view, stored_task):
        stop_id = f"stop-a{task.attempt}-t{task.index}"
        reason = f"the job shrinks to {job.spec.count} tasks"
        return [_proposal(task, OperationKind.STOP, stop_id, reason, now, attempt=task.attempt)]
    if awaits_preempt(view, stored_task):
        assert view.admission is not None
        by = view.admission.preempted_by
        return [
            _proposal(
                task,
                OperationKind.PREEMPT,
                f"preempt-a{task.attempt}-t{task.index}",
                f"preempted for {by}" if by else "preempted",
                now,
                deadline=now + timedelta(seconds=view.preempt_grace_s),
                attempt=task.attempt,
            )
        ]
    if not _is_live(view, task):
        return []
    proposals = []
    version = job.spec.task.version
    if task.version != version and is_healthy(task, view.statuses.get(task.index)):
        reason = f"update from version {task.version} to {version}"
        proposals.append(
            _proposal(
                task,
                OperationKind.UPDATE,
                update_id(version, task.index),
                reason,
                now,
                target_version=version,
            )
        )
    notice = next_maintenance(view, task.machine, now)
    if notice is not None:
        reason = (
            f"{notice.kind} maintenance of machine {task.machine} from "
            f"{notice.start:%Y-%m-%d %H:%M:%S}Z for {notice.duration_s}s"
            + (f": {notice.reason}" if notice.reason else "")
        )
        proposals.append(
            _proposal(
                task,
                OperationKind.MOVE,
                maintenance_id(notice, task.index, task.attempt),
                reason,
                now,
                deadline=notice.start,
                attempt=task.attempt,
                notice=notice.id,
            )
        )
    return proposals


def _applies(
    view: JobView, stored_task: Stored[Task], operation: TaskOperation, now: datetime
) -> bool:
    """Whether an open operation still makes sense for the task as it is now."""
    job, task = view.job.value, stored_task.value
    if operation.attempt is not None and operation.attempt != task.attempt:
        return False  # overtaken by a newer attempt
    if task.machine is None:
        return False  # nothing runs to restart, update or move
    if operation.kind is OperationKind.STOP:
        return awaits_stop(view, stored_task)
    if operation.kind is OperationKind.PREEMPT:
        return awaits_preempt(view, stored_task)
    if not _is_live(view, task):
        return False
    if operation.kind is OperationKind.UPDATE:
        # An unhealthy task's next attempt runs the job's version anyway.
        version = job.spec.task.version
        return (
            task.version != version
            and operation.id == update_id(version, task.index)
            and is_healthy(task, view.statuses.get(task.index))
        )
    if operation.notice is not None:
        notice = next_maintenance(view, task.machine, now)
        return notice is not None and notice.id == operation.notice
    return True


def _execute(
    view: JobView,
    stored_task: Stored[Task],
    stored_operation: Stored[TaskOperation],
    now: datetime,
    plan: Plan,
) -> None:
    """Adds the operation's task write to the plan, marking the operation done with it."""
    job, task, operation = view.job.value, stored_task.value, stored_operation.value
    done = OperationWrite(
        operation.model_copy(update={"state": OperationState.DONE, "updated_at": now}),
        stored_operation.revision,
    )
    if operation.kind is OperationKind.MOVE:
        # Released here, placed anew by the next reconcile: a machine under maintenance is not
        # up, so the allocator does not choose it again.
        moved = _changed(
            task,
            state=TaskState.PENDING,
            machine=None,
            message=f"moved off {task.machine}: {operation.reason}",
            updated_at=now,
        )
        plan.release.append(
            TaskWrite(
                task.index, stored_task.revision, moved, unassign=task.machine, operation=done
            )
        )
        return
    if operation.kind in (OperationKind.STOP, OperationKind.PREEMPT):
        stopped = _changed(task, desired=DesiredState.STOPPED, updated_at=now)
        write = TaskWrite(task.index, stored_task.revision, stopped, _assignment(job, stopped))
        plan.writes.append(replace(write, operation=done))
        return
    if operation.kind is OperationKind.UPDATE:
        message = f"updated to {job.spec.task.version}"
    else:
        message = f"restarted: {operation.reason}"
    write = _incarnation(job, stored_task, task.restarts, message, now)
    plan.writes.append(replace(write, operation=done))


def _withdrawn(stored: Stored[TaskOperation], now: datetime) -> OperationWrite:
    cancelled = stored.value.model_copy(
        update={"state": OperationState.CANCELLED, "updated_at": now}
    )
    return OperationWrite(cancelled, stored.revision)


def _plan_task(
    view: JobView, stored: Stored[Task], status: TaskStatus | None, now: datetime, plan: Plan
) -> None:
    job, task = view.job.value, stored.value
    machine_down = task.machine is not None and _is_down(
        view.machines.get(task.machine), known=view.machines_revision >= stored.revision
    )
    if machine_down and job.spec.at_most_once and not (status and status.state in FINISHED):
        _plan_reclaim(view, stored, now, plan)
        return
    if job.deleting or task.index >= view.live_count:
        if task.machine is None or machine_down or (status and status.state in FINISHED):
            plan.release.append(TaskWrite(task.index, stored.revision, None, unassign=task.machine))
        elif (
            task.desired is not DesiredState.STOPPED
            and not awaits_stop(view, stored)
            and not awaits_preempt(view, stored)
        ):
            stopped = _changed(task, desired=DesiredState.STOPPED, updated_at=now)
            plan.writes.append(
                TaskWrite(task.index, stored.revision, stopped, _assignment(job, stopped))
            )
        return
    if task.machine is None and task.state in FINISHED:
        return  # a batch task done for good
    if machine_down:
        plan.release.append(
            TaskWrite(task.index, stored.revision, _lost(task, now), unassign=task.machine)
        )
    elif task.machine is None:
        if not job.spec.at_most_once or _previous_attempt_ended(view, task.index, now, plan):
            plan.place.append(task.index)
    elif task.desired is DesiredState.STOPPED:
        # Scaled down and back up before it was removed: run it again, as a new attempt so that
        # the agent never confuses it with the stopping one.
        plan.writes.append(_incarnation(job, stored, task.restarts, "resumed", now))
    elif status is not None and status.state in FINISHED:
        _plan_restart(job, stored, status, now, plan)


def _lost(task: Task, now: datetime) -> Task:
    return _changed(
        task,
        state=TaskState.LOST,
        machine=None,
        message=f"machine {task.machine} is down",
        updated_at=now,
    )


def fenced_at(view: JobView, machine_id: str) -> datetime | None:
    """When an at-most-once task on the down machine is surely dead: its agent, or the task's
    supervisor, kills it once the fencing period has passed without a lease renewal, and the
    machine went down at least a lease TTL after the last renewal. None: it already is (the
    machine is gone, or was marked down by someone other than the health checker)."""
    machine = view.machines.get(machine_id)
    if machine is None or machine.down_since is None:
        return None
    return machine.down_since + timedelta(seconds=view.fencing_s + FENCE_MARGIN_S)


def _plan_reclaim(view: JobView, stored: Stored[Task], now: datetime, plan: Plan) -> None:
    """An at-most-once task whose machine is down, with no word that its process ended, is
    taken off the machine once the fencing period is over, and only if the machine's agent has
    not come back meanwhile."""
    task = stored.value
    assert task.machine is not None
    due = fenced_at(view, task.machine)
    if due is not None and now < due:
        plan.wake(due)
        return
    plan.reclaim.append(
        TaskWrite(
            task.index,
            stored.revision,
            _lost(task, now),
            unassign=task.machine,
            silent=task.machine,
        )
    )


def _previous_attempt_ended(view: JobView, index: int, now: datetime, plan: Plan) -> bool:
    """Whether an at-most-once task may be placed: its last status (of whatever attempt) says
    its process ended, or its machine is gone or down past the fencing period. Otherwise the
    status change that reports the end (or the end of the fencing period) reconciles again."""
    status = view.statuses.get(index)
    if status is None or status.state in TERMINAL_STATES:
        return True
    machine = view.machines.get(status.machine)
    if machine is not None and machine.state is not MachineState.DOWN:
        return False
    due = fenced_at(view, status.machine)
    if due is not None and now < due:
        plan.wake(due)
        return False
    return True


def _plan_restart(
    job: Job, stored: Stored[Task], status: TaskStatus, now: datetime, plan: Plan
) -> None:
    task, policy = stored.value, job.spec.task.restart
    if finished_for_good(job, task, status) and job.spec.kind is JobKind.BATCH:
        # Done: its machine and quota go to the next job at once.
        done = _changed(
            task, state=status.state, machine=None, message=_outcome(status), updated_at=now
        )
        plan.release.append(TaskWrite(task.index, stored.revision, done, unassign=task.machine))
        return
    if not wants_restart(job, status.state):
        return
    if task.restarts >= policy.max_restarts:
        message = f"gave up after {task.restarts} restarts"
        if task.message != message:
            plan.writes.append(
                TaskWrite(
                    task.index, stored.revision, _changed(task, message=message, updated_at=now)
                )
            )
        return
    finished_at = status.finished_at or status.updated_at
    due = finished_at + timedelta(seconds=backoff_s(policy, task.restarts))
    if now < due:
        plan.wake(due)
        return
    plan.writes.append(
        _incarnation(job, stored, task.restarts + 1, f"restarted: {_outcome(status)}", now)
    )


def _outcome(status: TaskStatus) -> str:
    """How the attempt ended, e.g. "failed with exit code 3"."""
    outcome = status.state.value
    if status.exit_code is not None:
        outcome += f" with exit code {status.exit_code}"
    return outcome


def finished_for_good(job: Job, task: Task, status: TaskStatus | None) -> bool:
    """Whether the task's process ended and it will not be restarted: done, or given up."""
    if task.machine is None:
        return task.state in FINISHED
    current = current_status(task, status)
    if current is None or current.state not in FINISHED:
        return False
    if not wants_restart(job, current.state):
        return True
    return task.restarts >= job.spec.task.restart.max_restarts


def wants_restart(job: Job, finished: TaskState) -> bool:
    """Whether the job's restart policy restarts a task that ended in `finished`.

    A task killed while it should run (not by the scheduler, which stops tasks with
    `desired=stopped` first) counts as failed.
    """
    if job.spec.kind is JobKind.BATCH and finished is TaskState.EXITED:
        return False
    match job.spec.task.restart.mode:
        case RestartMode.ALWAYS:
            return True
        case RestartMode.ON_FAILURE:
            return finished is not TaskState.EXITED
        case RestartMode.NEVER:
            return False


def backoff_s(policy: RestartPolicy, restarts: int) -> float:
    """`min(backoff_initial_s * 2**restarts, backoff_max_s)`."""
    # The exponent is capped so that a huge restart count cannot overflow a float.
    return min(policy.backoff_initial_s * 2.0 ** min(restarts, 64), policy.backoff_max_s)


def placement_writes(
    view: JobView, placements: Mapping[int, str], now: datetime
) -> list[TaskWrite]:
    """Each placed task becomes `placed` on its machine as a new attempt, with its assignment."""
    job = view.job.value
    writes = []
    for index, machine in sorted(placements.items()):
        stored = view.tasks.get(index)
        if stored is None or stored.value.machine is not None:
            continue
        placed = _changed(stored.value, machine=machine)
        writes.append(_incarnation(job, Stored(placed, stored.revision), placed.restarts, "", now))
    return writes


def unplaced_writes(view: JobView, unplaced: Mapping[int, str], now: datetime) -> list[TaskWrite]:
    """Tasks the allocator could not place stay pending with its reason as their message."""
    writes = []
    for index, reason in sorted(unplaced.items()):
        stored = view.tasks.get(index)
        if stored is None or stored.value.machine is not None or stored.value.message == reason:
            continue
        pending = _changed(stored.value, state=TaskState.PENDING, message=reason, updated_at=now)
        writes.append(TaskWrite(index, stored.revision, pending))
    return writes


def request_id(view: JobView, indexes: Sequence[int], nonce: str) -> str:
    """Names one Place call: the job generation, the tasks and their attempts, and a `nonce`.

    Allocators answer a repeated id from memory, so each decision to place gets a fresh nonce: a
    retry after "no room" must be placed anew. Repeating a call (failover to another replica)
    is still safe, since Place reports a task that is already placed where it is.
    """
    job = view.job.value
    attempts = ",".join(f"{i}@{view.tasks[i].value.attempt}" for i in sorted(indexes))
    digest = hashlib.sha256(attempts.encode()).hexdigest()[:16]
    return f"{job.handle}:{job.generation}:{digest}:{nonce}"


def _is_down(machine: Machine | None, *, known: bool) -> bool:
    """Whether the task's machine is down or gone; `known`: the view of the machines is at
    least as new as the task, so a machine missing from it was removed from the inventory."""
    if machine is None:
        return known
    return machine.state is MachineState.DOWN


def _new_task(job: Job, index: int, revision: int, now: datetime) -> Task:
    # Attempts fence agents, so they must never repeat for a task key, even across a task that
    # was deleted and created again (scale down and up, a job re-submitted under its name). Every
    # attempt a task had is at most the revision of the write that set it, which is before the
    # task's deletion, so numbering a new task's attempts from `revision` never reuses one.
    return Task(
        job=job.handle,
        index=index,
        generation=job.generation,
        attempt=revision,
        version=job.spec.task.version,
        updated_at=now,
    )


def _incarnation(
    job: Job, stored: Stored[Task], restarts: int, message: str, now: datetime
) -> TaskWrite:
    """A new attempt of the task on its machine, running the job's current spec."""
    task = stored.value
    started = _changed(
        task,
        attempt=task.attempt + 1,
        restarts=restarts,
        state=TaskState.PLACED,
        desired=DesiredState.RUNNING,
        generation=job.generation,
        version=job.spec.task.version,
        message=message,
        updated_at=now,
    )
    return TaskWrite(task.index, stored.revision, started, _assignment(job, started))


def _assignment(job: Job, task: Task) -> tuple[str, Assignment]:
    assert task.machine is not None, "only a task with a machine is assigned"
    return task.machine, Assignment(
        job=task.job,
        index=task.index,
        attempt=task.attempt,
        generation=task.generation,
        desired=task.desired,
        template=job.spec.task,
        at_most_once=job.spec.at_most_once,
    )


def _changed(task: Task, **changes: Any) -> Task:
    # Validated, unlike model_copy(update=...): a task on a machine must name it, and so on.
    return Task.model_validate({**task.model_dump(), **changes})
