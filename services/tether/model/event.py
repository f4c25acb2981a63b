"""What happens in a region, as `GET /v1/events` streams it: an event per change users follow."""

from __future__ import annotations

import enum

from pydantic import Field

from tether.model.base import JobHandle, Name, TetherModel, Timestamp


class EventKind(enum.StrEnum):
    """Each kind of event; its prefix before the dot names what it is about."""

    JOB_SUBMITTED = "job.submitted"
    JOB_UPDATED = "job.updated"
    """A new generation of its spec: scaled, updated, suspended or resumed."""
    JOB_DELETING = "job.deleting"
    JOB_DELETED = "job.deleted"
    """Its record is gone: every task stopped."""
    JOB_QUEUED = "job.queued"
    JOB_ADMITTED = "job.admitted"
    JOB_PREEMPTED = "job.preempted"
    TASK_PLACED = "task.placed"
    TASK_STARTED = "task.started"
    TASK_EXITED = "task.exited"
    """Its process ended: exited, failed or killed (`state`, and the exit code in `detail`)."""
    TASK_LOST = "task.lost"
    """Its machine went down."""
    TASK_RESTARTED = "task.restarted"
    TASK_PREEMPTED = "task.preempted"
    OPERATION_PROPOSED = "operation.proposed"
    OPERATION_APPROVED = "operation.approved"
    OPERATION_DONE = "operation.done"
    OPERATION_CANCELLED = "operation.cancelled"
    MACHINE_UP = "machine.up"
    MACHINE_DRAINING = "machine.draining"
    MACHINE_MAINTENANCE = "machine.maintenance"
    MACHINE_DOWN = "machine.down"
    MACHINE_DECOMMISSIONED = "machine.decommissioned"
    SHARD_MOVED = "shard.moved"
    """An entitlement's jobs are decided by another scheduler shard."""


class Subject(TetherModel):
    """What an event, or a state in a snapshot, is about."""

    entitlement: Name | None = None
    """Whose it is; None for a machine in the free pool (seen by admins only)."""
    job: JobHandle | None = None
    task: int | None = Field(default=None, ge=0)
    attempt: int | None = Field(default=None, ge=0)
    machine: Name | None = None
    operation: str | None = None
    shard: str | None = None
    state: str | None = None
    """Its state (for an event, the new one: a task's, a machine's, an operation's)."""
    detail: str = ""
    """What a person reads: a pid, an exit code, who preempted, where a task moved."""


class RegionEvent(Subject):
    """One event. `revision` is the store revision of the change: events come in its order, and
    a client resumes after the last revision it saw (SSE's Last-Event-ID)."""

    revision: int = Field(ge=1)
    kind: EventKind
    at: Timestamp
    """When the frontend saw the change."""


class RegionObject(Subject):
    """One thing's state now, as a snapshot tells it: what a follower that missed events needs
    instead of them."""

    what: str
    """job, admission, task (as the scheduler has it), task-status (as its agent reports it),
    operation, machine or shard."""


class RegionSnapshot(TetherModel):
    """The state, at `revision`, of everything a follower's filter selects."""

    revision: int = Field(ge=0)
    objects: list[RegionObject]
