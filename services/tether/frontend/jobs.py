"""Jobs: their views, submission (admission, idempotency) and compare-and-swap changes (scale,
update, delete)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from pydantic import ValidationError

from tether.frontend import records
from tether.frontend.admission import admissions_of, check_submission, position
from tether.frontend.bodies import spec_sha256
from tether.frontend.operations import job_operations
from tether.frontend.problems import Conflict, NotFound, validation_problem
from tether.frontend.schemas.jobs import JobView, UpdateRequest
from tether.model import (
    OPEN_STATES,
    ControlStatus,
    Job,
    JobHandle,
    JobSpec,
    PrincipalRecord,
    TetherModel,
    from_json,
    parse_job_handle,
    to_json,
    token_digest,
)
from tether.model.admission import Admission
from tether.store import Compare, Put, Store, key_missing, keys, mod_revision_is

ATTEMPTS: Final = 5
"""Compare-and-swap attempts before a write gives up with 409 (others kept changing the key)."""


class IdempotencyRecord(TetherModel):
    """What `idempotency/<sha256(principal name)>/<key>` holds: the submission a key made."""

    job: JobHandle
    spec_sha256: str


@dataclass(frozen=True, slots=True)
class Submitted:
    job: Job
    created: bool
    """False when an earlier submission with the same Idempotency-Key made the job."""


async def job_views(
    store: Store, entitlement: str | None, visible: Collection[str] | None
) -> list[JobView]:
    """The jobs (of `entitlement`, when given) of the entitlements in `visible` (None: all),
    each with its task counts and admission."""
    prefix = keys.JOBS if entitlement is None else keys.jobs_of(entitlement)
    found = await records.scan(store, prefix, Job)
    if visible is not None:
        found = [job for job in found if job.spec.entitlement in visible]
    tasks = await records.tasks_by_job(store, entitlement)
    prefix = keys.ADMISSIONS if entitlement is None else keys.admissions_of(entitlement)
    admissions = {record.job: record for record in await records.scan(store, prefix, Admission)}
    return [JobView.of(job, tasks.get(job.handle, []), admissions.get(job.handle)) for job in found]


async def job_view(store: Store, job: Job) -> JobView:
    """The job with its task counts, open operations and how its controller answers."""
    entitlement, name = job.spec.entitlement, job.spec.name
    # At once: every request that answers with a job waits for these reads.
    (tasks, statuses), operations, control, admission = await asyncio.gather(
        records.job_tasks(store, entitlement, name),
        job_operations(store, entitlement, name),
        records.get(store, keys.control_status(entitlement, name), ControlStatus),
        records.get(store, keys.admission(entitlement, name), Admission),
    )
    record = None if admission is None else admission.model
    view = JobView.of(job, tasks, record)
    if record is not None and record.waits:
        view = view.model_copy(
            update={"queue_position": position(await admissions_of(store, entitlement), job.handle)}
        )
    open_by_state = Counter(
        operation.state.value for operation in operations if operation.state in OPEN_STATES
    )
    return view.model_copy(
        update={
            "operations": dict(open_by_state),
            "control": control.model if control is not None else None,
            "progress": records.fewest_steps(statuses, job.spec.count),
        }
    )


async def _replay(store: Store, key: str, header: str, digest: str) -> Job | None:
    """The job an earlier submission with this idempotency key created, if any."""
    earlier = await records.get(store, key, IdempotencyRecord)
    if earlier is None:
        return None
    handle = earlier.model.job
    if earlier.model.spec_sha256 != digest:
        raise Conflict(
            f"Idempotency-Key '{header}' was already used to submit job '{handle}' with a "
            "different spec; use a new key for a new submission"
        )
    job = await records.get(store, keys.job(*parse_job_handle(handle)), Job)
    if job is None:
        raise Conflict(
            f"Idempotency-Key '{header}' was used to submit job '{handle}', which has since "
            "been deleted; use a new key to submit it again"
        )
    return job.model


async def submit(
    store: Store,
    principal: PrincipalRecord,
    spec: JobSpec,
    idempotency_key: str | None,
) -> Submitted:
    """Create the job at generation 1, queued, with its admission and idempotency records in
    the same transaction; 409 when it could never be admitted, or refuses to wait and cannot
    start now; 422 for a deadline in the past."""
    if spec.deadline is not None and spec.deadline <= datetime.now(UTC):
        raise validation_problem(
            [{"loc": ("deadline",), "msg": f"is in the past ({spec.deadline.isoformat()})"}]
        )
    region = await records.region_config(store)
    job_key = keys.job(spec.entitlement, spec.name)
    digest = spec_sha256(spec)
    # Keyed by the principal's name, not its token: all of its tokens share one keyspace.
    idem_key = (
        keys.idempotency(token_digest(principal.name), idempotency_key) if idempotency_key else None
    )
    for _ in range(ATTEMPTS):
        if idem_key is not None and idempotency_key is not None:
            earlier = await _replay(store, idem_key, idempotency_key, digest)
            if earlier is not None:
                return Submitted(earlier, created=False)
        existing = await records.get(store, job_key, Job)
        if existing is not None:
            if existing.model.deleting:
                raise Conflict(
                    f"job '{spec.handle}' is being deleted; submit it again once it is gone"
                )
            raise Conflict(
                f"job '{spec.handle}' already exists; scale it, or delete it first to replace it"
            )
        await check_submission(store, region, spec)
        now = datetime.now(UTC)
        job = Job(spec=spec, generation=1, created_at=now, updated_at=now, has_admission=True)
        admission_key = keys.admission(spec.entitlement, spec.name)
        # A record left by a job of the same name whose deletion did not finish is replaced.
        deletion = keys.entitlement_deletion(spec.entitlement)
        compares: list[Compare] = [key_missing(job_key), key_missing(deletion)]
        puts = [Put(job_key, to_json(job)), Put(admission_key, to_json(Admission.of(spec, now)))]
        if idem_key is not None:
            compares.append(key_missing(idem_key))
            idem = IdempotencyRecord(job=spec.handle, spec_sha256=digest)
            puts.append(Put(idem_key, to_json(idem)))
        if (await store.txn(compares, puts)).succeeded:
            return Submitted(job, created=True)
        if await store.get(deletion) is not None:
            raise Conflict(
                f"entitlement '{spec.entitlement}' is being deleted; its jobs cannot be submitted"
            )
    raise Conflict(f"job '{spec.handle}' kept changing while it was submitted; try again")


JobChange = Callable[[Job], Awaitable[Job | None]]
"""Computes a job's new record from its current one; None leaves it unchanged."""


async def change_job(store: Store, entitlement: str, name: str, change: JobChange) -> Job:
    """Apply `change` with compare-and-swap on the job's mod revision, retrying on conflict."""
    key = keys.job(entitlement, name)
    for _ in range(ATTEMPTS):
        current = await records.get(store, key, Job)
        if current is None:
            raise NotFound(f"job '{entitlement}/{name}' does not exist")
        changed = await change(current.model)
        if changed is None:
            return current.model
        result = await store.txn(
            [mod_revision_is(key, current.kv.mod_revision)], [Put(key, to_json(changed))]
        )
        if result.succeeded:
            return changed
    raise Conflict(f"job '{entitlement}/{name}' kept changing; try again")


def respecified(spec: JobSpec, **changes: object) -> JobSpec:
    """`spec` with `changes`, validated like a submitted spec (the region's task limit applies,
    only batch jobs suspend); 422 naming the field if it does not validate."""
    data = {**spec.model_dump(mode="json"), **changes}
    try:
        return from_json(JobSpec, json.dumps(data))
    except ValidationError as exc:
        raise validation_problem(exc.errors()) from None


async def scale(store: Store, entitlement: str, name: str, count: int) -> Job:
    """Set the job's task count and bump its generation, with its admission record in step in
    the same transaction: a scale-down lowers what is admitted (its quota is given back), and
    the tasks a scale-up adds go through admission as a submission's would (queued for the
    decider). 409 when they could never be admitted, or the job refuses to wait and they cannot
    start now, or while deleting."""
    job_key = keys.job(entitlement, name)
    admission_key = keys.admission(entitlement, name)
    for _ in range(ATTEMPTS):
        current = await records.get(store, job_key, Job)
        if current is None:
            raise NotFound(f"job '{entitlement}/{name}' does not exist")
        job = current.model
        if job.deleting:
            raise Conflict(f"job '{job.handle}' is being deleted and cannot be scaled")
        if job.spec.count == count:
            return job
        spec = respecified(job.spec, count=count)
        stored = await records.get(store, admission_key, Admission)
        # A job older than admission records runs all its tasks; scaled, it gets a record.
        admission = (
            Admission.admitted_whole(job.spec, job.created_at) if stored is None else stored.model
        )
        # Scaling down always goes through, even when a lowered quota is already exceeded.
        if count > job.spec.count:
            region = await records.region_config(store)
            await check_submission(store, region, spec, current=admission)
        now = datetime.now(UTC)
        scaled = job.model_copy(
            update={"spec": spec, "generation": job.generation + 1, "updated_at": now}
        )
        resized = admission.scaled(spec.count, spec.least_count, now)
        compares = [
            mod_revision_is(job_key, current.kv.mod_revision),
            key_missing(admission_key)
            if stored is None
            else mod_revision_is(admission_key, stored.kv.mod_revision),
        ]
        puts = [Put(job_key, to_json(scaled)), Put(admission_key, to_json(resized))]
        if (await store.txn(compares, puts)).succeeded:
            return scaled
    raise Conflict(f"job '{entitlement}/{name}' kept changing; try again")


async def update(store: Store, entitlement: str, name: str, request: UpdateRequest) -> Job:
    """Apply what `request` names and bump the generation (unless nothing changes); 409 while
    deleting, and for a placement change unless the job is suspended (or is being, by the same
    request)."""

    async def change(job: Job) -> Job | None:
        if job.deleting:
            raise Conflict(f"job '{job.handle}' is being deleted and cannot be updated")
        changes: dict[str, object] = {}
        if request.version is not None and request.version != job.spec.task.version:
            task = job.spec.task.model_copy(update={"version": request.version})
            changes["task"] = task.model_dump(mode="json")
        if request.suspended is not None and request.suspended != job.spec.suspended:
            changes["suspended"] = request.suspended
        if request.placement is not None and request.placement != job.spec.placement:
            if not (job.spec.suspended or request.suspended):
                raise Conflict(
                    f"job '{job.handle}' is not suspended: its placement changes only while "
                    "it is (its running tasks would not move); suspend it first"
                )
            changes["placement"] = request.placement.model_dump(mode="json")
        if not changes:
            return None
        return job.model_copy(
            update={
                "spec": respecified(job.spec, **changes),
                "generation": job.generation + 1,
                "updated_at": datetime.now(UTC),
            }
        )

    return await change_job(store, entitlement, name, change)


async def delete(store: Store, entitlement: str, name: str) -> Job:
    """Mark the job deleting (the scheduler stops its tasks, then removes it); idempotent."""

    async def mark(job: Job) -> Job | None:
        if job.deleting:
            return None
        return job.model_copy(update={"updated_at": datetime.now(UTC), "deleting": True})

    return await change_job(store, entitlement, name, mark)
