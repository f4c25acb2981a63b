"""/v1/jobs: submit, list, show, scale and delete jobs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from starlette.responses import Response

from tether.frontend import jobs, operations, records
from tether.frontend.api import AUTH_PROBLEMS, EntitlementName, JobName, problems, request_body
from tether.frontend.auth import CurrentPrincipal, authorize_entitlement, visible_entitlements
from tether.frontend.bodies import (
    IDEMPOTENCY_KEY_PATTERN,
    IDEMPOTENCY_KEY_RULE,
    check_idempotency_key,
    parse_model,
    read_body,
)
from tether.frontend.deps import SettingsDep, StoreDep
from tether.frontend.problems import NotFound
from tether.frontend.revisions import ReadsDep
from tether.frontend.schemas.jobs import JobList, JobView, ScaleRequest, UpdateRequest
from tether.frontend.schemas.operations import OperationList, OperationRequest
from tether.model import Job, JobSpec, Name
from tether.store import Store, keys

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=AUTH_PROBLEMS)


def _location(job: Job) -> dict[str, str]:
    return {"Location": f"/v1/jobs/{job.handle}"}


@router.post(
    "",
    status_code=201,
    response_model=JobView,
    responses={
        200: {"model": JobView, "description": "An earlier submission with this key made it."},
        **problems(400, 404, 409, 413, 422),
    },
    openapi_extra=request_body(
        JobSpec, "A JobSpec, as JSON or as YAML (Content-Type: application/yaml).", yaml=True
    ),
)
async def submit_job(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    idempotency_key: Annotated[
        str | None,
        # Documented, not enforced here: check_idempotency_key answers 400 with the rule.
        Header(
            description=f"Makes retries safe: {IDEMPOTENCY_KEY_RULE}.",
            json_schema_extra={"pattern": IDEMPOTENCY_KEY_PATTERN},
        ),
    ] = None,
) -> Response:
    """Submit a job. 201 with the new job; 200 with the job an earlier submission with the
    same Idempotency-Key and spec created."""
    key = check_idempotency_key(idempotency_key)
    body = await read_body(request, settings.max_body_bytes)
    spec = parse_model(JobSpec, body, request.headers.get("content-type"))
    await authorize_entitlement(store, principal, spec.entitlement)
    submitted = await jobs.submit(store, principal, spec, key)
    view = await jobs.job_view(store, submitted.job)
    return view.response(201 if submitted.created else 200, _location(submitted.job))


@router.get("", response_model=JobList, responses=problems(404))
async def list_jobs(
    store: ReadsDep,
    principal: CurrentPrincipal,
    entitlement: Annotated[Name | None, Query(description="Only this entitlement's jobs.")] = None,
) -> Response:
    """Jobs of the entitlements the principal belongs to (every job for admins)."""
    if entitlement is not None:
        await authorize_entitlement(store, principal, entitlement)
    visible = None if principal.is_admin else await visible_entitlements(store, principal)
    return JobList(jobs=await jobs.job_views(store, entitlement, visible)).response()


@router.get("/{ent}/{job}", response_model=JobView, responses=problems(404))
async def get_job(
    store: ReadsDep, principal: CurrentPrincipal, ent: EntitlementName, job: JobName
) -> Response:
    """One job with its task counts by effective state."""
    await authorize_entitlement(store, principal, ent)
    return (await jobs.job_view(store, await _existing(store, ent, job))).response()


@router.post(
    "/{ent}/{job}/scale",
    response_model=JobView,
    responses=problems(400, 404, 409, 413, 422),
    openapi_extra=request_body(ScaleRequest, 'The new task count: {"count": 5}.'),
)
async def scale_job(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    ent: EntitlementName,
    job: JobName,
) -> Response:
    """Change the task count; the job's generation grows by one (unless the count is the same)."""
    await authorize_entitlement(store, principal, ent)
    body = await read_body(request, settings.max_body_bytes)
    wanted = parse_model(ScaleRequest, body, request.headers.get("content-type"))
    scaled = await jobs.scale(store, ent, job, wanted.count)
    return (await jobs.job_view(store, scaled)).response()


@router.patch(
    "/{ent}/{job}",
    response_model=JobView,
    responses=problems(400, 404, 409, 413, 422),
    openapi_extra=request_body(
        UpdateRequest,
        'A version to roll out, {"version": "2.0"}; a batch job suspended or resumed, '
        '{"suspended": true}; or, while suspended, another placement.',
    ),
)
async def update_job(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    ent: EntitlementName,
    job: JobName,
) -> Response:
    """Roll out another package version: running tasks become UPDATE operations that the job's
    TaskController approves (without one, at most `update.max_unavailable_percent` of the tasks
    are down at once). Suspend a batch job: its tasks stop with notice, as if preempted, and it
    holds no quota until resumed, when it is admitted again at its place in the queue. Change
    the placement of a suspended job. The generation grows by one, unless nothing changes."""
    await authorize_entitlement(store, principal, ent)
    body = await read_body(request, settings.max_body_bytes)
    wanted = parse_model(UpdateRequest, body, request.headers.get("content-type"))
    updated = await jobs.update(store, ent, job, wanted)
    return (await jobs.job_view(store, updated)).response()


@router.get("/{ent}/{job}/operations", response_model=OperationList, responses=problems(404))
async def list_operations(
    store: ReadsDep, principal: CurrentPrincipal, ent: EntitlementName, job: JobName
) -> Response:
    """The job's task operations: open ones, and completed ones until its controller heard of
    them."""
    await authorize_entitlement(store, principal, ent)
    await _existing(store, ent, job)
    return OperationList(operations=await operations.job_operations(store, ent, job)).response()


@router.post(
    "/{ent}/{job}/operations",
    status_code=202,
    response_model=OperationList,
    responses=problems(400, 404, 409, 413, 422),
    openapi_extra=request_body(OperationRequest, "Which operation, on which tasks, and why."),
)
async def request_operations(
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
    principal: CurrentPrincipal,
    ent: EntitlementName,
    job: JobName,
) -> Response:
    """Ask to restart or move tasks (default: every task). Each task gets an operation that the
    job's TaskController approves (without one, at most `update.max_unavailable_percent` of the
    tasks are down at once); a task with one of that kind open already keeps it."""
    await authorize_entitlement(store, principal, ent)
    body = await read_body(request, settings.max_body_bytes)
    wanted = parse_model(OperationRequest, body, request.headers.get("content-type"))
    found = await _existing(store, ent, job)
    created = await operations.request(store, found, wanted, principal, datetime.now(UTC))
    return OperationList(operations=created).response(202)


async def _existing(store: Store, ent: str, job: str) -> Job:
    found = await records.get(store, keys.job(ent, job), Job)
    if found is None:
        raise NotFound(f"job '{ent}/{job}' does not exist")
    return found.model


@router.delete("/{ent}/{job}", status_code=202, response_model=JobView, responses=problems(404))
async def delete_job(
    store: StoreDep, principal: CurrentPrincipal, ent: EntitlementName, job: JobName
) -> Response:
    """Start deleting the job: the scheduler stops its tasks, then removes it."""
    await authorize_entitlement(store, principal, ent)
    deleted = await jobs.delete(store, ent, job)
    return (await jobs.job_view(store, deleted)).response(202)
