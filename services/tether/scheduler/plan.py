"""What a reconcile reads about one job and the writes it plans: the records with their
revisions (`JobView`), the plan (`Plan`, `TaskWrite`, `OperationWrite`), and the task writes that
both the task and the operation planning make."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from tether.model import (
    DEFAULT_FENCING_S,
    DEFAULT_GRACE_S,
    AdvanceNotice,
    Assignment,
    DesiredState,
    Job,
    Machine,
    Task,
    TaskOperation,
    TaskState,
    TaskStatus,
    current_status,
)
from tether.model.admission import Admission

T = TypeVar("T")


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
        """How many of its tasks should run: its count, at most what it is admitted (none
        while its admission record has not shown yet; all of a job older than the records)."""
        job = self.job.value
        if self.admission is None:
            return 0 if job.has_admission else job.spec.count
        return min(job.spec.count, self.admission.admitted)


@dataclass(frozen=True, slots=True)
class OperationWrite:
    """An operation's new record, written only if its key is still at `revision` (0: new)."""

    operation: TaskOperation
    revision: int


@dataclass(frozen=True, slots=True)
class TaskWrite:
    """One task's new record (None: delete the task and, unless `keep_status`, its status) with
    its assignment changes, written only if the task key is still at `revision` (0: the task
    must not exist yet)."""

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
    keep_status: bool = False
    """A preempted or suspended task's status outlives it: the progress it reported is where
    its next attempt resumes (`reported_progress`). The job's deletion deletes it."""


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
    create: list[TaskWrite] = field(default_factory=list)
    """New tasks, placed with `place` and written once: on the machine `Allocator.Place`
    chose, or pending with its reason (a write and a watch event fewer per task than writing
    them pending and placing them on the next reconcile)."""
    operations: list[OperationWrite] = field(default_factory=list)
    """Operations proposed or withdrawn (executed ones go with their task's write)."""
    delete_job: bool = False
    """The job is deleting and has no task left: delete its key."""
    wake_at: datetime | None = None
    """When a restart backoff ends: reconcile the job again then."""

    def wake(self, at: datetime) -> None:
        self.wake_at = at if self.wake_at is None else min(self.wake_at, at)


def is_healthy(task: Task, status: TaskStatus | None) -> bool:
    """Whether the task runs its current attempt on its machine."""
    current = current_status(task, status)
    return current is not None and current.state is TaskState.RUNNING


def incarnation(
    job: Job,
    stored: Stored[Task],
    restarts: int,
    message: str,
    now: datetime,
    progress: float | None,
) -> TaskWrite:
    """A new attempt of the task on its machine, running the job's current spec, resuming
    from `progress`."""
    task = stored.value
    started = changed(
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
    return TaskWrite(task.index, stored.revision, started, assignment(job, started, progress))


def assignment(job: Job, task: Task, progress: float | None) -> tuple[str, Assignment]:
    """What the task's machine runs; a new attempt resumes from `progress`."""
    assert task.machine is not None, "only a task with a machine is assigned"
    return task.machine, Assignment(
        job=task.job,
        index=task.index,
        attempt=task.attempt,
        generation=task.generation,
        desired=task.desired,
        template=job.spec.task,
        at_most_once=job.spec.at_most_once,
        progress=progress,
        accelerator=job.spec.accelerator,
    )


def reported_progress(view: JobView, index: int) -> float | None:
    """The steps task `index` last reported, by whichever attempt: its status outlives an
    attempt, and a preempted task's outlives the task (`TaskWrite.keep_status`)."""
    status = view.statuses.get(index)
    return None if status is None else status.progress


def changed(task: Task, **changes: Any) -> Task:
    # Validated, unlike model_copy(update=...): a task on a machine must name it, and so on.
    return Task.model_validate({**task.model_dump(), **changes})
