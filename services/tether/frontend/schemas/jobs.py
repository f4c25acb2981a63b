"""Job views, and the scale and update requests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

from pydantic import ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from tether.frontend.records import TaskRecords, state_counts
from tether.frontend.schemas import View
from tether.model import (
    ControlStatus,
    Job,
    JobSpec,
    Placement,
    TaskState,
    TetherModel,
    Timestamp,
    Version,
)
from tether.model.admission import Admission
from tether.model.job import RegionTaskLimit

UPDATABLE = ("version", "suspended", "placement")
"""The fields of a job that PATCH changes."""


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
    progress: float | None = None
    """The fewest steps any of its tasks reported (`TETHER_PROGRESS_FILE`), kept across
    preemption and suspension: a gang's step count (a single job's view only; None until every
    task reported)."""

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
    """The body of PATCH /v1/jobs/{ent}/{job}: at least one of its fields."""

    # What _something checks: one of the fields is given, and not null.
    model_config = ConfigDict(
        json_schema_extra={
            "anyOf": [
                {"required": [field], "properties": {field: {"not": {"type": "null"}}}}
                for field in UPDATABLE
            ]
        }
    )

    version: Version | None = Field(
        default=None,
        description="The package version to roll out: running tasks are updated through the "
        "job's TaskController (or at most the update policy's max_unavailable_percent at once).",
    )
    suspended: bool | None = Field(
        default=None,
        description="Suspend a batch job (its tasks stop with notice, as if preempted, and it "
        "holds no quota) or resume it (it is admitted again at its place in the queue); 422 "
        "for a service.",
    )
    placement: Placement | None = Field(
        default=None,
        description="Where its tasks go: changed only while the job is suspended (409 "
        "otherwise: its running tasks would not move), as an application-level scheduler "
        "sends a job to another machine type before resuming it.",
    )

    @model_validator(mode="after")
    def _something(self) -> UpdateRequest:
        if all(getattr(self, field) is None for field in UPDATABLE):
            raise PydanticCustomError(
                "nothing_to_update",
                "name at least one of {fields}",
                {"fields": ", ".join(UPDATABLE)},
            )
        return self


class ScaleRequest(TetherModel):
    """The body of POST /v1/jobs/{ent}/{job}/scale."""

    count: Annotated[int, RegionTaskLimit()] = Field(
        ge=1,
        description="The new task count. The job's spec with it must still validate (422 "
        "naming the field otherwise: below its min_count, say).",
    )
