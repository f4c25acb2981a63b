"""Restarts and moves on request: one task operation per task, approved like any other."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Final

from tether.frontend import records
from tether.frontend.problems import Conflict, validation_problem
from tether.frontend.schemas.operations import OperationRequest
from tether.model import (
    OPEN_STATES,
    Job,
    OperationKind,
    PrincipalRecord,
    Task,
    TaskOperation,
    to_json,
)
from tether.store import Op, Put, Store, key_missing, keys

_WRITE_CHUNK: Final = 60
"""Operations written per transaction (a compare and a put each; etcd allows 128)."""


async def job_operations(store: Store, entitlement: str, name: str) -> list[TaskOperation]:
    """The job's operations, oldest first."""
    found = await records.scan(store, keys.operations_of(entitlement, name), TaskOperation)
    return sorted(found, key=lambda operation: (operation.created_at, operation.id))


async def request(
    store: Store,
    job: Job,
    wanted: OperationRequest,
    principal: PrincipalRecord,
    now: datetime,
) -> list[TaskOperation]:
    """Proposes one operation per task; a task with one of that kind open already keeps it.

    409 when the job is being deleted or a task is not placed (nothing runs to restart or
    move); 422 naming indexes past the job's count.
    """
    if job.deleting:
        raise Conflict(f"job '{job.handle}' is being deleted")
    entitlement, name = job.spec.entitlement, job.spec.name
    indexes = list(dict.fromkeys(wanted.tasks)) if wanted.tasks else list(range(job.spec.count))
    beyond = [index for index in indexes if index >= job.spec.count]
    if beyond:
        missing = ", ".join(map(str, beyond[:10]))
        message = f"job '{job.handle}' has tasks 0-{job.spec.count - 1}; there is no task {missing}"
        raise validation_problem([{"loc": ("tasks",), "msg": message}])
    # The tasks alone: their statuses do not decide whether there is something to act on.
    tasks = {t.index: t for t in await records.scan(store, keys.tasks_of(entitlement, name), Task)}
    unplaced = [i for i in indexes if i not in tasks or tasks[i].machine is None]
    if unplaced:
        raise Conflict(
            f"task(s) {', '.join(map(str, unplaced[:10]))} of job '{job.handle}' have no "
            f"machine yet: nothing runs to {wanted.kind.value}"
        )
    kind = OperationKind(wanted.kind.value)
    already = {
        index: operation
        for operation in await job_operations(store, entitlement, name)
        if operation.kind is kind and operation.state in OPEN_STATES
        for index in operation.tasks
    }
    batch = uuid.uuid4().hex[:12]
    reason = f"{wanted.reason or 'requested'} (by {principal.name})"
    created = [
        TaskOperation(
            id=f"{kind.value}-{batch}-t{index}",
            kind=kind,
            job=job.handle,
            tasks=[index],
            reason=reason,
            created_at=now,
            updated_at=now,
            attempt=tasks[index].attempt,
        )
        for index in indexes
        if index not in already
    ]
    for start in range(0, len(created), _WRITE_CHUNK):
        chunk = created[start : start + _WRITE_CHUNK]
        chunk_keys = [keys.operation(entitlement, name, operation.id) for operation in chunk]
        ops: list[Op] = [
            Put(key, to_json(operation)) for key, operation in zip(chunk_keys, chunk, strict=True)
        ]
        await store.txn([key_missing(key) for key in chunk_keys], ops)
    kept = {already[i].id: already[i] for i in indexes if i in already}
    return [*kept.values(), *created]
