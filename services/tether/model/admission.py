"""Admission: a job's place in its entitlement's queue, what the decider granted it, and its
history (queued, admitted, preempted, requeued)."""

from __future__ import annotations

import enum
import math
from datetime import datetime
from typing import Final

from pydantic import Field

from tether.model.base import JobHandle, Name, NonEmptyStr, Quantity, TetherModel, Timestamp
from tether.model.job import JobSpec
from tether.model.resources import Resources

HISTORY_KEPT: Final = 32
"""Events an admission record keeps, newest last."""


class AdmissionState(enum.StrEnum):
    """queued -> admitted -> (preempting -> queued again)."""

    QUEUED = "queued"
    """Waiting for quota; holds none."""
    ADMITTED = "admitted"
    """Its `admitted` tasks may run."""
    PREEMPTING = "preempting"
    """Chosen to make room: its tasks are being stopped, and it goes back to its queue, at its
    place, once they are."""


class AdmissionEventKind(enum.StrEnum):
    QUEUED = "queued"
    ADMITTED = "admitted"
    RESIZED = "resized"
    """Admitted more or fewer tasks: grown or shrunk by the decider, or scaled by its owner."""
    PREEMPTED = "preempted"
    REQUEUED = "requeued"


class PreemptionCause(enum.StrEnum):
    """Why a job's tasks were preempted."""

    PRIORITY = "priority"
    """For a higher-priority job of its own entitlement."""
    RECLAIM = "reclaim"
    """It ran on quota another entitlement lent, and that entitlement needs it back."""
    FAIR_SHARE = "fair-share"
    """It borrowed beyond its weighted fair share, and a borrower below its share waits."""
    SUSPENDED = "suspended"
    """Its owner (or its application-level scheduler) suspended it."""


class AdmissionEvent(TetherModel):
    """One change of a job's admission."""

    at: Timestamp
    kind: AdmissionEventKind
    detail: str = ""
    tasks: Quantity = 0
    """The tasks it concerned (admitted, preempted, given back by a scale-down)."""
    by: JobHandle | None = None
    """The job whose admission caused it (the preemptor)."""
    cause: PreemptionCause | None = None
    """Why it was preempted (`preempted` only)."""


class Admission(TetherModel):
    """What `admissions/<entitlement>/<job>` holds. The frontend creates it with the job; the
    entitlement tree's decider (the scheduler leader of the tree's shard) changes it."""

    job: JobHandle
    state: AdmissionState = AdmissionState.QUEUED
    priority: int = Field(ge=0, le=1000)
    start_deadline: Timestamp | None = None
    """The job's start deadline (Cameo): the queue's second key."""
    queued_at: Timestamp
    """When it joined the queue; kept when a preempted job goes back, so it keeps its place."""
    task_resources: Resources
    tasks: Quantity
    """The job's count, kept in step with its spec by the frontend."""
    least_tasks: Quantity
    """The fewest tasks it is admitted with (`min_count`, else `tasks`)."""
    admitted: Quantity = 0
    """Tasks it may run now."""
    admitted_at: Timestamp | None = None
    reason: str = ""
    """Why it waits, or what it waits for."""
    preempted_by: JobHandle | None = None
    preemptions: Quantity = 0
    """Times it was preempted (not failures)."""
    preempted_at: list[Timestamp] = Field(default_factory=list)
    """Its preemptions in the last hour, for the rate limit."""
    history: list[AdmissionEvent] = Field(default_factory=list, max_length=HISTORY_KEPT)
    updated_at: Timestamp

    @classmethod
    def of(cls, spec: JobSpec, now: datetime) -> Admission:
        """A new job's record: queued since `now`."""
        return cls(
            job=spec.handle,
            priority=spec.priority,
            start_deadline=spec.start_deadline,
            queued_at=now,
            task_resources=spec.task.resources,
            tasks=spec.count,
            least_tasks=spec.least_count,
            history=[AdmissionEvent(at=now, kind=AdmissionEventKind.QUEUED)],
            updated_at=now,
        )

    @classmethod
    def admitted_whole(cls, spec: JobSpec, created_at: datetime) -> Admission:
        """The record of a job older than admission records: admitted whole by the quota check
        of its day."""
        return cls.of(spec, created_at).model_copy(
            update={"state": AdmissionState.ADMITTED, "admitted": spec.count}
        )

    @property
    def holds(self) -> int:
        """The tasks it is admitted, within its count: a record a scale-down wrote before
        scale-downs lowered `admitted` may still say more."""
        return min(self.admitted, self.tasks)

    @property
    def waits(self) -> bool:
        """Whether it waits for tasks to be admitted: queued, or admitted with fewer than its
        count (an elastic job growing, a job scaled up)."""
        if self.state is AdmissionState.QUEUED:
            return True
        return self.state is AdmissionState.ADMITTED and self.admitted < self.tasks

    @property
    def asks(self) -> int:
        """The fewest more tasks it needs admitted to make progress."""
        if self.state is AdmissionState.QUEUED:
            return self.least_tasks
        # Admitted: a scale-up is admitted whole, an elastic job grows by one at a time.
        return 1 if self.growing else self.tasks - self.admitted

    @property
    def growing(self) -> bool:
        """An elastic job admitted, which may grow (one task at a time, as quota frees)."""
        return self.state is AdmissionState.ADMITTED and self.least_tasks < self.tasks

    def queue_key(self) -> tuple[bool, int, float, float, str]:
        """Its place among the jobs waiting for admission: `order`, elastic growth after every
        job still waiting to start."""
        return (self.growing, *self.order())

    def scaled(self, count: int, least: int, now: datetime) -> Admission:
        """The record once its job is scaled to `count` tasks (`least` the fewest it runs
        with): admitted no more than `count`, so a scale-down gives quota back at once, and no
        more than before, so the tasks a scale-up adds wait for the decider as a submission's
        do."""
        admitted = min(self.holds, count)
        changes: dict[str, object] = {"tasks": count, "least_tasks": least, "admitted": admitted}
        if self.state is AdmissionState.ADMITTED and admitted == count:
            changes["reason"] = ""  # it no longer waits
        event = AdmissionEvent(
            at=now,
            kind=AdmissionEventKind.RESIZED,
            detail=f"scaled from {self.tasks} to {count} task(s), {admitted} admitted",
            tasks=self.admitted - admitted,
        )
        return self.with_event(event, **changes)

    def order(self) -> tuple[int, float, float, str]:
        """Its place in its entitlement's queue: priority (higher first), start deadline (none
        last), time queued, name."""
        deadline = math.inf if self.start_deadline is None else self.start_deadline.timestamp()
        return (-self.priority, deadline, self.queued_at.timestamp(), self.job)

    def with_event(self, event: AdmissionEvent, **changes: object) -> Admission:
        """The record with `changes` and one more history event (the oldest dropped)."""
        history = [*self.history, event][-HISTORY_KEPT:]
        return self.model_copy(update={**changes, "history": history, "updated_at": event.at})


class EntitlementUse(TetherModel):
    """What one entitlement of a tree reserves, borrows and lends, as its decider sees it."""

    name: Name
    parent: Name | None = None
    weight: int = Field(ge=1)
    quota: Resources
    reserved: Resources
    """What its subtree reserves: its jobs' tasks that hold resources or may claim them, and
    at least the part of each child's quota the child does not lend."""
    borrowed: Resources
    """What its subtree reserves beyond its quota."""
    lent: Resources
    """The part of its idle quota its siblings' borrowing uses."""
    dominant_share: float = Field(ge=0)
    """Its reservation's largest fraction of its parent's quota, divided by its weight."""
    queued: Quantity
    """Jobs waiting in its queue."""
    admitted: Quantity
    """Jobs admitted (or being preempted)."""


class QueueStatus(TetherModel):
    """What `queue-status/<root>` holds: every entitlement of the tree, written by its decider
    when it changed (looked at every few seconds and after admitting), on the decider's leader
    lease."""

    root: Name
    decider: NonEmptyStr
    entitlements: list[EntitlementUse]
    updated_at: Timestamp
