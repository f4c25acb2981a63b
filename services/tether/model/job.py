"""Jobs: N identical tasks of one template, where they may run, and the stored job record."""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from tether.config import limit_settings
from tether.model.accelerator import AcceleratorSpec
from tether.model.base import (
    JOB_HANDLE_RULE,
    STORED_CONTEXT,
    JobHandle,
    Name,
    NonEmptyStr,
    PlannedTime,
    PositiveSeconds,
    Quantity,
    TetherModel,
    TextRule,
    Timestamp,
    Version,
)
from tether.model.placement import Placement
from tether.model.resources import Resources

RESERVED_ENV_PREFIX = "TETHER_"


def _not_reserved(name: str) -> str:
    if name.startswith(RESERVED_ENV_PREFIX):
        raise PydanticCustomError(
            "reserved_env_var",
            "names starting with {prefix} are reserved for the variables Tether sets",
            {"prefix": RESERVED_ENV_PREFIX},
        )
    return name


EnvName = Annotated[
    str,
    TextRule(
        r"^[A-Za-z_][A-Za-z0-9_]*$",
        "must be letters, digits and '_', not starting with a digit",
        "invalid_env_name",
    ),
    AfterValidator(_not_reserved),
]


class RestartMode(enum.StrEnum):
    """When the agent restarts a task whose process ended."""

    ALWAYS = "always"
    ON_FAILURE = "on-failure"
    NEVER = "never"


MAX_BACKOFF_S: Final = 24 * 3600
"""The longest a task waits to be restarted: the scheduler adds it to a time."""
MAX_EXPECTED_DURATION_S: Final = 10 * 366 * 24 * 3600
"""Ten years: a start deadline, `deadline - expected_duration_s`, stays a date."""


class RestartPolicy(TetherModel):
    """How often and how fast a task's process is restarted."""

    mode: RestartMode = RestartMode.ALWAYS
    max_restarts: Quantity = 10
    backoff_initial_s: PositiveSeconds = Field(default=1.0, le=MAX_BACKOFF_S)
    backoff_max_s: PositiveSeconds = Field(default=60.0, le=MAX_BACKOFF_S, validate_default=True)
    """At least `backoff_initial_s` (422 otherwise)."""

    @field_validator("backoff_max_s")
    @classmethod
    def _max_not_below_initial(cls, backoff_max: float, info: ValidationInfo) -> float:
        initial = info.data.get("backoff_initial_s")
        if initial is not None and backoff_max < initial:
            raise PydanticCustomError(
                "backoff_order",
                "must be at least backoff_initial_s ({initial})",
                {"initial": initial},
            )
        return backoff_max


class TaskTemplate(TetherModel):
    """What every task of a job runs."""

    package: Name
    version: Version
    command: NonEmptyStr
    args: list[str] = Field(default_factory=list)
    env: dict[EnvName, str] = Field(
        default_factory=dict,
        # What _not_reserved checks, which the names' pattern does not say.
        json_schema_extra={"propertyNames": {"not": {"pattern": f"^{RESERVED_ENV_PREFIX}"}}},
    )
    """Environment variables, none named TETHER_...: those are the ones Tether sets."""
    resources: Resources
    restart: RestartPolicy = Field(default_factory=RestartPolicy)


class JobKind(enum.StrEnum):
    """Services run until stopped; batch jobs run to completion."""

    SERVICE = "service"
    BATCH = "batch"


class UpdatePolicy(TetherModel):
    """How a rolling update proceeds."""

    max_unavailable_percent: int = Field(default=10, ge=1, le=100)


class RegionTaskLimit:
    """Documents the region's max_tasks_per_job as the maximum of a request's count. Only
    requests: stored jobs keep a count above a limit lowered since they were accepted."""

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        if handler.mode == "validation":
            json_schema["maximum"] = limit_settings().max_tasks_per_job
        return json_schema


BATCH_ONLY: Final = ("deadline", "min_count", "expected_duration_s", "accelerator")
"""JobSpec fields that only batch jobs may set."""


def _batch_only_schema(schema: dict[str, Any]) -> None:
    # What _batch_only and _only_batch_suspends check: without kind (a service) or with another
    # kind than batch, these fields must be absent or null, and the job not suspended.
    schema["if"] = {"properties": {"kind": {"not": {"const": JobKind.BATCH.value}}}}
    schema["then"] = {
        "properties": {
            **{field: {"type": "null"} for field in BATCH_ONLY},
            "suspended": {"const": False},
        }
    }


class OnFull(enum.StrEnum):
    """What a submission does when its entitlement cannot take it now."""

    QUEUE = "queue"
    """Wait in the entitlement's queue; admitted, whole, as soon as quota frees."""
    REJECT = "reject"
    """Refused with 409."""


class JobSpec(TetherModel):
    """A job as its owner submits it."""

    model_config = ConfigDict(json_schema_extra=_batch_only_schema)

    name: Name
    entitlement: Name
    count: Annotated[int, RegionTaskLimit()] = Field(ge=1)
    """At most the region's max_tasks_per_job (TETHER_LIMITS_MAX_TASKS_PER_JOB)."""
    task: TaskTemplate
    placement: Placement = Field(default_factory=Placement)
    priority: int = Field(default=100, ge=0, le=1000)
    """Higher runs first: it orders the entitlement's queue, and a job may preempt strictly
    lower priorities (up to the region's non_preemptible_priority, which are never preempted)."""
    kind: JobKind = JobKind.SERVICE
    update: UpdatePolicy = Field(default_factory=UpdatePolicy)
    on_full: OnFull | None = None
    """When the entitlement cannot take the job now: queue (the default for batch jobs) or
    reject with 409 (the default for services)."""
    deadline: PlannedTime | None = None
    """Only for batch jobs: when it should be done. Orders the queue by its start deadline,
    `deadline - expected_duration_s`; not in the past when submitted (422 otherwise: the
    frontend checks against its clock)."""
    expected_duration_s: PositiveSeconds | None = Field(default=None, le=MAX_EXPECTED_DURATION_S)
    """Only for batch jobs: how long it runs once started."""
    min_count: int | None = Field(default=None, ge=1)
    """Only for batch jobs: an elastic job is admitted with at least this many tasks (at most
    `count`: 422 otherwise), grows as quota frees and shrinks first under pressure. None: all
    or nothing."""
    accelerator: AcceleratorSpec | None = None
    """Only for batch jobs: a training job that Gavel's policies schedule, its gang of
    `scale_factor` tasks with one GPU each. So `scale_factor` is `count`, `min_count` is absent
    and `task.resources.gpus` is 1 (422 otherwise)."""
    suspended: bool = False
    """Only for batch jobs: a suspended job runs no task and holds no quota. Suspending a
    running job stops its tasks with notice, as a preemption does (its controller is told, and
    they have the entitlement's grace to checkpoint); it keeps its place in the queue and is
    admitted again, there, once resumed. What an application-level scheduler (Gavel's rounds)
    turns jobs on and off with; a job may be submitted suspended."""
    at_most_once: bool = False
    """Never run two processes of one task at once, even across a partition: a task whose
    machine went silent is replaced only after the region's fencing period, by which time its
    agent (or, without one, its supervisor) has killed it; it also stops when its agent cannot
    reach the store for that long. Fixed when the job is submitted."""

    @field_validator("count")
    @classmethod
    def _within_region_limit(cls, count: int, info: ValidationInfo) -> int:
        if info.context and info.context.get(STORED_CONTEXT):
            return count
        limit = limit_settings().max_tasks_per_job
        if count > limit:
            raise PydanticCustomError(
                "too_many_tasks",
                "must be at most {limit}, the region's max_tasks_per_job; operators can raise "
                "it with the TETHER_LIMITS_MAX_TASKS_PER_JOB environment variable",
                {"limit": limit},
            )
        return count

    @field_validator(*BATCH_ONLY)
    @classmethod
    def _batch_only(cls, value: object, info: ValidationInfo) -> object:
        kind = info.data.get("kind")
        if value is not None and kind is not None and kind is not JobKind.BATCH:
            raise PydanticCustomError(
                "batch_only",
                "only batch jobs may set {field}, and this job's kind is '{kind}'",
                {"field": info.field_name, "kind": kind.value},
            )
        return value

    @field_validator("accelerator")
    @classmethod
    def _one_gpu_per_worker(
        cls, accelerator: AcceleratorSpec | None, info: ValidationInfo
    ) -> AcceleratorSpec | None:
        count, task = info.data.get("count"), info.data.get("task")
        if accelerator is None or count is None or task is None:
            return accelerator
        if accelerator.scale_factor != count:
            raise PydanticCustomError(
                "scale_factor_not_count",
                "scale_factor ({scale_factor}) must be the job's count ({count}): one task "
                "per worker of the gang",
                {"scale_factor": accelerator.scale_factor, "count": count},
            )
        if info.data.get("min_count") is not None:
            raise PydanticCustomError(
                "elastic_gang", "an accelerator job's gang runs whole: it has no min_count", {}
            )
        if task.resources.gpus != 1:
            raise PydanticCustomError(
                "not_one_gpu",
                "each task of an accelerator job asks for exactly 1 GPU, not {gpus}",
                {"gpus": task.resources.gpus},
            )
        return accelerator

    @field_validator("suspended")
    @classmethod
    def _only_batch_suspends(cls, suspended: bool, info: ValidationInfo) -> bool:
        kind = info.data.get("kind")
        if suspended and kind is not None and kind is not JobKind.BATCH:
            raise PydanticCustomError(
                "batch_only",
                "only batch jobs may be suspended, and this job's kind is '{kind}'",
                {"kind": kind.value},
            )
        return suspended

    @field_validator("min_count")
    @classmethod
    def _min_within_count(cls, min_count: int | None, info: ValidationInfo) -> int | None:
        count = info.data.get("count")
        if min_count is not None and count is not None and min_count > count:
            raise PydanticCustomError(
                "min_count_above_count",
                "must be at most count ({count})",
                {"count": count},
            )
        return min_count

    @property
    def full_action(self) -> OnFull:
        """`on_full`, or its default for the job's kind."""
        if self.on_full is not None:
            return self.on_full
        return OnFull.QUEUE if self.kind is JobKind.BATCH else OnFull.REJECT

    @property
    def least_count(self) -> int:
        """The fewest tasks it is admitted with: `min_count`, or all of them."""
        return self.count if self.min_count is None else self.min_count

    @property
    def start_deadline(self) -> datetime | None:
        """The latest time it can start and still meet its deadline (Cameo's order)."""
        if self.deadline is None:
            return None
        return self.deadline - timedelta(seconds=self.expected_duration_s or 0.0)

    @property
    def handle(self) -> str:
        """`<entitlement>/<name>`."""
        return f"{self.entitlement}/{self.name}"


class Job(TetherModel):
    """A job as the store keeps it."""

    spec: JobSpec
    generation: Quantity
    """Bumped on every change of `spec`; tasks record the generation they run."""
    created_at: Timestamp
    updated_at: Timestamp
    deleting: bool = False
    has_admission: bool = False
    """An admission record (`admissions/<handle>`) governs it, as it does every job submitted
    since the queues landed: a reader that has not seen the record yet (it comes through
    another watch than the job's) runs none of its tasks. Jobs stored before have none and run
    whole."""

    @property
    def handle(self) -> str:
        """`<entitlement>/<name>`."""
        return self.spec.handle


_JOB_HANDLE: TypeAdapter[str] = TypeAdapter(JobHandle)


def parse_job_handle(handle: str) -> tuple[str, str]:
    """Split `<entitlement>/<job>` into its parts; ValueError says what is wrong."""
    try:
        _JOB_HANDLE.validate_python(handle)
    except ValidationError:
        raise ValueError(f"invalid job handle {handle!r}: {JOB_HANDLE_RULE}") from None
    entitlement, name = handle.split("/")
    return entitlement, name
