"""Job views, and the scale and update requests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import Field

from tether.frontend.records import TaskRecords, state_counts
from tether.frontend.schemas import View
from tether.model import ControlStatus, Job, JobSpec, TaskState, TetherModel, Timestamp, Version
from tether.model.admission import Admission
from tether.model.job import RegionTaskLimit


class JobView(View):
    """A job, its spec and how many of its tasks are in each effective state."""

    handle: str
    entitlement: str
    name: str
    count: int
    generation: int
    deleting: bool
    created_at: Timestamp
    updated_at: Timestamp
    spec: JobSpec
    tasks: dict[str, int]
    """Task count by effective state; every state is listed."""
    running: int
    """How many tasks run (effective state `running`)."""
    operations: dict[str, int] | None = None
    """Open task operations by state (a single job's view only)."""
    control: ControlStatus | None = None
    """How asking the job's TaskController goes (a single job's view only; None: it never had
    one to ask)."""
    admission: Admission | None = None
    """Its place in its entitlement's queue and what it is admitted (None: a job older than
    admission, which runs all its tasks)."""
    queue_position: int | None = None
    """1 for the next job its entitlement admits; None when it is not waiting (a single job's
    view only)."""

    @classmethod
    def of(
        cls, job: Job, tasks: Sequence[TaskRecords], admission: Admission | None = None
    ) -> JobView:
        counts = state_counts(records.state for records in tasks)
        return cls(
            handle=job.handle,
            entitlement=job.spec.entitlement,
            name=job.spec.name,
            count=job.spec.count,
            generation=job.generation,
            deleting=job.deleting,
            created_at=job.created_at,
            updated_at=job.updated_at,
            spec=job.spec,
            tasks=counts,
            running=counts[TaskState.RUNNING.value],
            admission=admission,
        )


class JobList(View):
    jobs: list[JobView]


class UpdateRequest(TetherModel):
    """The body of PATCH /v1/jobs/{ent}/{job}."""

    version: Version = Field(
        description="The package version to roll out: running tasks are updated through the "
        "job's TaskController (or at most the update policy's max_unavailable_percent at once)."
    )


class ScaleRequest(TetherModel):
    """The body of POST /v1/jobs/{ent}/{job}/scale."""

    count: Annotated[int, RegionTaskLimit()] = Field(ge=1, description="The new task count.")
