"""What the leader does to one job, decided from its records alone (no I/O, so it is testable)."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Final

from tether.model import (
    FINISHED_STATES,
    TERMINAL_STATES,
    DesiredState,
    Job,
    JobKind,
    Machine,
    MachineState,
    RestartMode,
    RestartPolicy,
    Task,
    TaskState,
    TaskStatus,
    current_status,
)
from tether.scheduler.operations import awaits_preempt, awaits_stop, plan_operations
from tether.scheduler.plan import (
    JobView,
    Plan,
    Stored,
    TaskWrite,
    assignment,
    changed,
    incarnation,
    reported_progress,
)

FENCE_MARGIN_S: Final = 2.0
"""Added to the fencing period before an at-most-once task of a down machine runs elsewhere:
for the clocks of the health checker's and the scheduler's hosts, and the agent's poll."""


def plan_job(view: JobView, now: datetime, changed: Collection[int] | None = None) -> Plan:
    """Decides what to do about one job, per docs/protocol.md ("The scheduler leader's loop").

    `changed`: when only these tasks' records (task, status) changed since the job was last
    planned whole, only they are planned: the others' plans would be what they were, and a job
    whose hundreds of tasks report their starts one by one is not planned whole each time.
    None plans every task; so must any change to the job, its admission, operations, machines
    or the clock's deadlines (wake-ups)."""
    job = view.job.value
    plan = Plan()
    indexes = _indexes(view, changed)
    if not job.deleting:
        creatable = range(view.live_count) if changed is None else indexes
        for index in creatable:
            if index < view.live_count and index not in view.tasks:
                new = TaskWrite(index, 0, _new_task(job, index, view.revision, now))
                if job.spec.at_most_once and not _previous_attempt_ended(view, index, now, plan):
                    plan.writes.append(new)  # pending until its previous attempt's end shows
                else:
                    plan.create.append(new)
    for index in indexes:
        stored = view.tasks.get(index)
        if stored is not None:
            status = current_status(stored.value, view.statuses.get(index))
            _plan_task(view, stored, status, now, plan)
        elif index in view.statuses and index >= job.spec.count:
            # A status kept for a preempted task (`keep_status`) whose index the job no longer
            # has: a later scale-up must not resume a new task from an old run's steps.
            plan.writes.append(TaskWrite(index, 0, None))
    plan_operations(view, now, plan, changed=None if changed is None else indexes)
    plan.delete_job = job.deleting and not view.tasks
    return plan


def _indexes(view: JobView, changed: Collection[int] | None) -> list[int]:
    """The task indexes to plan, in order: those `changed`, or all the job has records of."""
    if changed is not None:
        return sorted(changed)
    return sorted(view.tasks.keys() | view.statuses.keys())


def _plan_task(
    view: JobView, stored: Stored[Task], status: TaskStatus | None, now: datetime, plan: Plan
) -> None:
    job, task = view.job.value, stored.value
    machine_down = task.machine is not None and _is_down(
        view.machines.get(task.machine), known=view.machines_revision >= stored.revision
    )
    if machine_down and job.spec.at_most_once and not (status and status.state in FINISHED_STATES):
        _plan_reclaim(view, stored, now, plan)
        return
    if job.deleting or task.index >= view.live_count:
        if task.machine is None or machine_down or (status and status.state in FINISHED_STATES):
            # Preempted or suspended (not scaled down): it will run again, from its progress.
            preempted = not job.deleting and task.index < job.spec.count
            plan.release.append(
                TaskWrite(
                    task.index,
                    stored.revision,
                    None,
                    unassign=task.machine,
                    keep_status=preempted,
                )
            )
        elif (
            task.desired is not DesiredState.STOPPED
            and not awaits_stop(view, stored)
            and not awaits_preempt(view, stored)
        ):
            stopped = changed(task, desired=DesiredState.STOPPED, updated_at=now)
            progress = reported_progress(view, task.index)
            plan.writes.append(
                TaskWrite(task.index, stored.revision, stopped, assignment(job, stopped, progress))
            )
        return
    if task.machine is None and task.state in FINISHED_STATES:
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
        progress = reported_progress(view, task.index)
        plan.writes.append(incarnation(job, stored, task.restarts, "resumed", now, progress))
    elif status is not None and status.state in FINISHED_STATES:
        _plan_restart(job, stored, status, now, plan)


def _lost(task: Task, now: datetime) -> Task:
    return changed(
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
        done = changed(
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
                    task.index, stored.revision, changed(task, message=message, updated_at=now)
                )
            )
        return
    finished_at = status.finished_at or status.updated_at
    due = finished_at + timedelta(seconds=backoff_s(policy, task.restarts))
    if now < due:
        plan.wake(due)
        return
    plan.writes.append(
        incarnation(
            job,
            stored,
            task.restarts + 1,
            f"restarted: {_outcome(status)}",
            now,
            status.progress,
        )
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
        return task.state in FINISHED_STATES
    current = current_status(task, status)
    if current is None or current.state not in FINISHED_STATES:
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
        placed = changed(stored.value, machine=machine, move_to=None)
        progress = reported_progress(view, index)
        writes.append(
            incarnation(job, Stored(placed, stored.revision), placed.restarts, "", now, progress)
        )
    return writes


def unplaced_writes(view: JobView, unplaced: Mapping[int, str], now: datetime) -> list[TaskWrite]:
    """Tasks the allocator could not place stay pending with its reason as their message."""
    writes = []
    for index, reason in sorted(unplaced.items()):
        stored = view.tasks.get(index)
        if stored is None or stored.value.machine is not None or stored.value.message == reason:
            continue
        pending = changed(stored.value, state=TaskState.PENDING, message=reason, updated_at=now)
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
