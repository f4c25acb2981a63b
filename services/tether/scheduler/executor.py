"""Carries out a job's `Plan`: allocator calls, then fenced store transactions."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from pydantic import ValidationError

from tether import metrics
from tether.model import ControlStatus, OperationKind, from_json, parse_job_handle, to_json
from tether.model.admission import AdmissionState
from tether.model.ephemeral import EphemeralResource
from tether.scheduler.allocator_client import Allocator, AllocatorError
from tether.scheduler.plan import JobView, OperationWrite, Plan, Stored, TaskWrite
from tether.scheduler.reconciler import placement_writes, request_id, unplaced_writes
from tether.store import (
    Compare,
    Delete,
    Get,
    KeyValue,
    Op,
    Put,
    RangeResult,
    Store,
    key_missing,
    keys,
    mod_revision_is,
)
from tether.store.election import Fence

_log = logging.getLogger(__name__)

# Tasks per transaction: each task takes up to four operations (task, assignment, status or
# the operation it executes), and etcd refuses transactions of more than 128 by default.
_CHUNK = 30


class NotLeader(Exception):
    """A write found someone else's value in the leader key: this replica was deposed."""


class NotOwner(Exception):
    """The job's entitlement is no longer this shard's (it moved): the job is not ours to
    decide for any more, though we still lead the shard."""


OwnedAt = Callable[[str], int | None]
"""The mod revision of an entitlement's shard-map entry as this leader saw it when the
entitlement was (or became) this shard's; None when it is not this shard's."""


@dataclass(slots=True)
class Outcome:
    """What executing a plan did: the store revisions written (for mirrors to catch up with)
    and whether some task is still waiting for a machine."""

    tasks_revision: int = 0
    job_revision: int = 0
    operations_revision: int = 0
    unplaced: bool = False


class Executor:
    """Executes plans as the shard's leader. Every transaction compares the leader key, and the
    job's entitlement's shard-map entry with the revision at which this leader took it over: a
    write made after an admin moved the entitlement to another shard fails, so the old and the
    new shard never both decide for the same job."""

    def __init__(self, store: Store, fence: Fence, allocator: Allocator, owned_at: OwnedAt) -> None:
        self._store = store
        self._fence = fence
        self._allocator = allocator
        self._owned_at = owned_at

    async def execute(self, view: JobView, plan: Plan, *, may_place: bool = True) -> Outcome:
        """Runs the plan; `may_place=False` leaves pending tasks for a later retry.

        Raises NotLeader when deposed, AllocatorError when a Release failed (nothing that
        depends on it has been written then; reclaimed tasks are written before theirs).
        """
        job = view.job.value
        outcome = Outcome()
        if plan.reclaim:
            outcome.tasks_revision = await self._reclaim(job.handle, plan.reclaim)
        if plan.release:
            await self._allocator.release(
                job.handle,
                [write.index for write in plan.release],
                return_emptied=preempted_for_another(view),
            )
            outcome.tasks_revision = await self.commit(job.handle, plan.release)
            _count_moves(view, plan.release)
        if plan.writes:
            outcome.tasks_revision = max(
                outcome.tasks_revision, await self.commit(job.handle, plan.writes)
            )
        if plan.operations:
            outcome.operations_revision = await self.commit_operations(job.handle, plan.operations)
        if plan.place or plan.create:
            if may_place:
                revision, outcome.unplaced = await self._place(view, plan.place, plan.create)
            else:
                revision, outcome.unplaced = await self.commit(job.handle, plan.create), True
            outcome.tasks_revision = max(outcome.tasks_revision, revision)
        if plan.delete_job:
            outcome.job_revision = await self._delete_job(view)
        return outcome

    async def _reclaim(self, job_handle: str, writes: Sequence[TaskWrite]) -> int:
        """Writes each task off its silent machine (one transaction each: a machine whose agent
        came back holds up only its own tasks), then releases the ones written. Should the
        release fail, the allocator still holds their machines: a later Place reports them
        there, and the next reconcile takes them off again."""
        revision = 0
        reclaimed = []
        for write in writes:
            written = await self._txn(job_handle, *_task_ops(job_handle, [write]))
            if written:
                revision = written
                reclaimed.append(write.index)
        if reclaimed:
            await self._allocator.release(job_handle, reclaimed)
        return revision

    async def _place(
        self, view: JobView, pending: list[int], create: Sequence[TaskWrite]
    ) -> tuple[int, bool]:
        """Places the pending tasks and the new ones; writes where they go (the new ones
        pending if they go nowhere yet)."""
        job = view.job.value
        if create:
            # The new records as if stored, at revision 0: their writes create the keys.
            new = {write.index: Stored(write.task, 0) for write in create if write.task}
            view = replace(view, tasks={**view.tasks, **new})
        indexes = sorted([*pending, *(write.index for write in create)])
        moving = {
            index: task.move_to
            for index in pending
            if (task := view.tasks[index].value).move_to is not None
        }
        try:
            result = await self._allocator.place(
                job.handle,
                indexes,
                job.generation,
                request_id(view, indexes, uuid.uuid4().hex),
                preferred=moving,
            )
        except AllocatorError as error:
            # A stale generation or an unknown job is resolved by the job's next change; an
            # unreachable allocator by a retry. Either way the tasks stay pending.
            _log.warning("%s: placing %d tasks failed: %s", job.handle, len(indexes), error)
            return await self.commit(job.handle, create), True
        now = datetime.now(UTC)
        writes = placement_writes(view, result.placements, now)
        writes += unplaced_writes(view, result.unplaced, now)
        answered = {write.index for write in writes}
        writes += [write for write in create if write.index not in answered]
        if result.unplaced:
            _log.info(
                "%s: %d of %d tasks not placed, e.g. %s",
                job.handle,
                len(result.unplaced),
                len(indexes),
                next(iter(result.unplaced.values())),
            )
        return await self.commit(job.handle, writes), bool(result.unplaced)

    async def commit(self, job_handle: str, writes: Sequence[TaskWrite]) -> int:
        """Writes the tasks in chunks, each one transaction; a chunk whose compares fail is
        retried task by task, and a task whose record changed meanwhile is skipped (the next
        reconcile sees the change). Returns the last revision written (0: none)."""
        revision = 0
        for start in range(0, len(writes), _CHUNK):
            chunk = writes[start : start + _CHUNK]
            written = await self._txn(job_handle, *_task_ops(job_handle, chunk))
            if written:
                revision = written
                continue
            for write in chunk if len(chunk) > 1 else ():
                written = await self._txn(job_handle, *_task_ops(job_handle, [write]))
                revision = max(revision, written)
        return revision

    async def commit_operations(self, job_handle: str, writes: Sequence[OperationWrite]) -> int:
        """Writes each operation if its key is where the plan saw it (one transaction each, so
        one that changed meanwhile holds up no other); returns the last revision written."""
        revision = 0
        for write in writes:
            compares, ops = _operation_ops(job_handle, write)
            revision = max(revision, await self._txn(job_handle, compares, ops))
        return revision

    async def approve(
        self,
        job_handle: str,
        approved: Sequence[OperationWrite],
        reported: Sequence[tuple[str, int]],
    ) -> int:
        """Marks operations approved, and forgets the completed ones that were `reported` (id,
        mod revision), unless they changed since; returns the last revision written."""
        revision = await self.commit_operations(job_handle, approved)
        if reported:
            entitlement, name = parse_job_handle(job_handle)
            forgotten = [(keys.operation(entitlement, name, i), at) for i, at in reported]
            compares = [mod_revision_is(key, at) for key, at in forgotten]
            ops: list[Op] = [Delete(key) for key, _ in forgotten]
            revision = max(revision, await self._txn(job_handle, compares, ops))
        return revision

    async def next_sequence(self, job_handle: str) -> int:
        """The job's next TaskControl sequence number, kept in the store so that it grows
        across leaders."""
        status = await self._change_control(
            job_handle, lambda s: s.model_copy(update={"sequence": s.sequence + 1})
        )
        assert status is not None, "a new sequence number is always written"
        return status.sequence

    async def control_outcome(self, job_handle: str, controller: str, error: str) -> int:
        """Records how the last call to the job's controller went ("" error: it succeeded),
        writing only when that changes what `tether job show` reports; returns the calls that
        failed in a row."""

        def outcome(status: ControlStatus) -> ControlStatus | None:
            failures = status.failures + 1 if error else 0
            if (status.controller, status.error, status.failures) == (controller, error, failures):
                return None
            return status.model_copy(
                update={"controller": controller, "error": error, "failures": failures}
            )

        changed = await self._change_control(job_handle, outcome)
        return changed.failures if changed is not None else 0

    async def _change_control(
        self, job_handle: str, change: Callable[[ControlStatus], ControlStatus | None]
    ) -> ControlStatus | None:
        """Read-modify-write of the job's ControlStatus; None when `change` left it alone."""
        entitlement, name = parse_job_handle(job_handle)
        key = keys.control_status(entitlement, name)
        while True:
            kv = await self._store.get(key)
            status = (
                ControlStatus() if kv is None else from_json(ControlStatus, kv.value, stored=True)
            )
            changed = change(status)
            if changed is None:
                return None
            changed = changed.model_copy(update={"updated_at": datetime.now(UTC)})
            compare = mod_revision_is(key, kv.mod_revision) if kv is not None else key_missing(key)
            if await self._txn(job_handle, [compare], [Put(key, to_json(changed))]):
                return changed

    async def _delete_job(self, view: JobView) -> int:
        entitlement, name = parse_job_handle(view.job.value.handle)
        job_key = keys.job(entitlement, name)
        # Statuses an agent wrote after their task was deleted would otherwise outlive the job,
        # and so would its operations. The TaskControl sequence stays: a job submitted again
        # under the name keeps counting up for a controller registered for the handle.
        ops: list[Op] = [
            Delete(job_key),
            Delete(keys.admission(entitlement, name)),
            Delete(keys.statuses_of(entitlement, name), prefix=True),
            Delete(keys.operations_of(entitlement, name), prefix=True),
        ]
        compares = [mod_revision_is(job_key, view.job.revision)]
        # The ephemeral resources the job owns go with it, unless a member changed one
        # meanwhile (the next attempt reads it again).
        for kv in await self._owned_resources(entitlement, name):
            compares.append(mod_revision_is(kv.key, kv.mod_revision))
            ops.append(Delete(kv.key))
        return await self._txn(view.job.value.handle, compares, ops)

    async def _owned_resources(self, entitlement: str, job: str) -> list[KeyValue]:
        found = await self._store.range(keys.ephemeral_resources_of(entitlement))
        owned = []
        for kv in found.kvs:
            try:
                record = from_json(EphemeralResource, kv.value, stored=True)
            except ValidationError as error:
                _log.warning("ignoring ephemeral resource %s: not valid: %s", kv.key, error)
                continue
            if record.owner_job == job:
                owned.append(kv)
        return owned

    async def _txn(self, job_handle: str, compares: list[Compare], ops: list[Op]) -> int:
        """Runs `ops` for the job if `compares`, the leader fence and the job's shard-map
        entry hold; the revision written, or 0."""
        entitlement, _ = parse_job_handle(job_handle)
        owned_at = self._owned_at(entitlement)
        if owned_at is None:
            raise NotOwner(f"entitlement {entitlement} is not this shard's")
        shard_key = keys.shard_assignment(entitlement)
        result = await self._store.txn(
            [self._fence.compare(), mod_revision_is(shard_key, owned_at), *compares],
            ops,
            [Get(self._fence.key), Get(shard_key)],
        )
        if result.succeeded:
            return result.revision
        leader, owner = result.results
        assert isinstance(leader, RangeResult)
        assert isinstance(owner, RangeResult)
        if not self._fence.holds_in(leader):
            raise NotLeader(f"{self._fence.key} no longer holds this replica")
        if not any(kv.mod_revision == owned_at for kv in owner.kvs):
            raise NotOwner(f"entitlement {entitlement} moved to another shard")
        return 0


def _task_ops(job_handle: str, writes: Sequence[TaskWrite]) -> tuple[list[Compare], list[Op]]:
    entitlement, name = parse_job_handle(job_handle)
    compares: list[Compare] = []
    ops: list[Op] = []
    for write in writes:
        task_key = keys.task(entitlement, name, write.index)
        compares.append(mod_revision_is(task_key, write.revision))
        if write.silent is not None:
            compares.append(key_missing(keys.heartbeat(write.silent)))
        if write.task is None:
            ops.append(Delete(task_key))
            if not write.keep_status:
                ops.append(Delete(keys.task_status(entitlement, name, write.index)))
        else:
            ops.append(Put(task_key, to_json(write.task)))
        if write.unassign is not None:
            ops.append(Delete(keys.assignment(write.unassign, entitlement, name, write.index)))
        if write.assignment is not None:
            machine, assignment = write.assignment
            ops.append(
                Put(keys.assignment(machine, entitlement, name, write.index), to_json(assignment))
            )
        if write.operation is not None:
            operation_compares, operation_ops = _operation_ops(job_handle, write.operation)
            compares += operation_compares
            ops += operation_ops
    return compares, ops


def _operation_ops(job_handle: str, write: OperationWrite) -> tuple[list[Compare], list[Op]]:
    entitlement, name = parse_job_handle(job_handle)
    key = keys.operation(entitlement, name, write.operation.id)
    compare = mod_revision_is(key, write.revision) if write.revision else key_missing(key)
    return [compare], [Put(key, to_json(write.operation))]


def preempted_for_another(view: JobView) -> bool:
    """Whether the job's tasks are stopping because a job of another entitlement preempted
    them (a reclaim, or fair share): the machines they leave empty go back to the free pool at
    once, for the preemptor, instead of idling in this entitlement."""
    admission = view.admission
    if admission is None or admission.state is not AdmissionState.PREEMPTING:
        return False
    by = admission.preempted_by
    return by is not None and parse_job_handle(by)[0] != view.job.value.spec.entitlement


def _count_moves(view: JobView, released: Sequence[TaskWrite]) -> None:
    """The moves the released tasks made, by the kind of notice that asked for them (planned
    maintenance, a drain, a harvest machine's shrink or eviction)."""
    kinds = {
        notice.id: notice.kind.value for notices in view.maintenance.values() for notice in notices
    }
    for write in released:
        done = write.operation
        if done is not None and done.operation.kind is OperationKind.MOVE:
            notice = done.operation.notice
            # A notice deleted since the move was proposed: its kind is gone with it.
            metrics.TASK_MOVES.labels(kinds.get(notice or "", "other")).inc()
