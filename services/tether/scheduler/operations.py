"""The task operations a job's tasks need (updates, maintenance moves, stops of a shrink,
preemptions): proposed, executed when approved or due, withdrawn when they no longer apply (pure,
part of the reconcile)."""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from tether.model import (
    OPEN_STATES,
    AdvanceNotice,
    DesiredState,
    OperationKind,
    OperationState,
    Task,
    TaskOperation,
    TaskState,
)
from tether.scheduler.plan import (
    JobView,
    OperationWrite,
    Plan,
    Stored,
    TaskWrite,
    assignment,
    changed,
    incarnation,
    is_healthy,
    reported_progress,
)


def update_id(version: str, index: int) -> str:
    """The id of the operation that updates task `index` to `version`: the same on every
    reconcile, so an operation is proposed once."""
    return f"update-{hashlib.sha256(version.encode()).hexdigest()[:12]}-t{index}"


def plan_operations(
    view: JobView, now: datetime, plan: Plan, *, changed: Collection[int] | None = None
) -> None:
    """Proposes the operations the job's tasks need (updates to the job's version, moves off
    machines with maintenance ahead, stops of tasks a shrink removes from a job with a
    controller), executes the approved ones and those whose deadline has
    come, and withdraws the ones that no longer apply.

    A task this plan already writes is left alone: its next reconcile decides on its new record.
    At most one operation per task executes in a plan, since each makes a new attempt.
    `changed`: plan only these tasks (see `plan_job`); None plans them all.
    """
    touched = {write.index for write in (*plan.reclaim, *plan.release, *plan.writes)}
    open_by_task: dict[int, list[Stored[TaskOperation]]] = {}
    for stored in sorted(view.operations.values(), key=lambda s: (s.value.created_at, s.value.id)):
        if stored.value.state in OPEN_STATES:
            for index in stored.value.tasks:
                if changed is None or index in changed:
                    open_by_task.setdefault(index, []).append(stored)
    for index in sorted(view.tasks) if changed is None else sorted(changed):
        stored_task = view.tasks.get(index)
        if stored_task is None:
            continue  # its open operations are withdrawn below
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


def next_maintenance(view: JobView, task: Task, now: datetime) -> AdvanceNotice | None:
    """The maintenance of the task's machine that is not over yet, moves the task (a harvest
    shrink names the tasks it moves) and starts first."""
    if task.machine is None:
        return None
    task_id = f"{view.job.value.handle}/{task.index}"
    notices = view.maintenance.get(task.machine, ())
    return next((n for n in notices if now < n.end and n.names(task_id)), None)


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


def is_live(view: JobView, task: Task) -> bool:
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
    if not is_live(view, task):
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
    notice = next_maintenance(view, task, now)
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
    if not is_live(view, task):
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
        notice = next_maintenance(view, task, now)
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
        # Released here, placed anew by the next reconcile (on its target, if it names one and
        # the machine still takes it): a machine under maintenance is not up, so the allocator
        # does not choose it again.
        moved = changed(
            task,
            state=TaskState.PENDING,
            machine=None,
            move_to=operation.target_machine,
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
        stopped = changed(task, desired=DesiredState.STOPPED, updated_at=now)
        progress = reported_progress(view, task.index)
        write = TaskWrite(
            task.index, stored_task.revision, stopped, assignment(job, stopped, progress)
        )
        plan.writes.append(replace(write, operation=done))
        return
    if operation.kind is OperationKind.UPDATE:
        message = f"updated to {job.spec.task.version}"
    else:
        message = f"restarted: {operation.reason}"
    progress = reported_progress(view, task.index)
    write = incarnation(job, stored_task, task.restarts, message, now, progress)
    plan.writes.append(replace(write, operation=done))


def _withdrawn(stored: Stored[TaskOperation], now: datetime) -> OperationWrite:
    cancelled = stored.value.model_copy(
        update={"state": OperationState.CANCELLED, "updated_at": now}
    )
    return OperationWrite(cancelled, stored.revision)
