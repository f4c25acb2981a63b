"""The event sources' pure derivation: a key's digest before and after a change, and its events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.allocator_builders import job as build_job
from tests.support.allocator_builders import machine
from tether.frontend.events.sources.admissions import Admissions
from tether.frontend.events.sources.base import Change, Source
from tether.frontend.events.sources.jobs import Jobs
from tether.frontend.events.sources.machines import Machines
from tether.frontend.events.sources.operations import Operations
from tether.frontend.events.sources.owners import Owners
from tether.frontend.events.sources.registry import SOURCES
from tether.frontend.events.sources.shards import Shards
from tether.frontend.events.sources.statuses import Statuses
from tether.frontend.events.sources.tasks import Tasks
from tether.model import (
    Allocation,
    Job,
    MachineState,
    Task,
    TaskState,
    TaskStatus,
    TetherModel,
    to_json,
)
from tether.model.admission import (
    Admission,
    AdmissionEvent,
    AdmissionEventKind,
    AdmissionState,
    PreemptionCause,
)
from tether.model.operation import OperationKind, OperationState, TaskOperation
from tether.model.resources import Resources
from tether.store import KeyValue, keys

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CHANGE = Change(7, NOW)


def kv(key: str, record: TetherModel | bytes) -> KeyValue:
    value = record if isinstance(record, bytes) else to_json(record)
    return KeyValue(key, value, 1, 7, 1)


def told(source: Source[Any], key: str, before: Any, after: Any) -> list[tuple[str, Any]]:
    """(kind, detail) of each event `source` tells of `key` going from `before` to `after`
    (records, or None)."""
    was, now = (None if r is None else source.digest(kv(key, r)) for r in (before, after))
    return [(e.kind.value, e.detail) for e in source.events(key, was, now, CHANGE)]


def test_every_prefix_has_one_source() -> None:
    prefixes = [source.prefix for source in SOURCES]
    assert len(prefixes) == len(set(prefixes))
    assert all(prefix in keys.ALL_PREFIXES for prefix in prefixes)


def job(generation: int = 1, count: int = 2, deleting: bool = False) -> Job:
    return build_job(
        "web", entitlement="team-a", count=count, generation=generation, deleting=deleting
    )


def test_a_job_submitted_updated_deleting_and_deleted() -> None:
    key = keys.job("team-a", "web")
    jobs = Jobs()
    assert told(jobs, key, None, job()) == [("job.submitted", "2 task(s)")]
    assert told(jobs, key, job(), job(2, 5)) == [("job.updated", "generation 2, 5 task(s)")]
    assert told(jobs, key, job(), job(deleting=True)) == [("job.deleting", "")]
    assert told(jobs, key, job(deleting=True), None) == [("job.deleted", "")]
    # A write that changes nothing a follower cares about tells nothing.
    assert told(jobs, key, job(), job()) == []
    event = jobs.events(key, None, jobs.digest(kv(key, job())), CHANGE)[0]
    assert (event.entitlement, event.job, event.revision) == ("team-a", "team-a/web", 7)


def admission(state: AdmissionState, admitted: int = 0, preemptions: int = 0) -> Admission:
    history = [
        AdmissionEvent(at=NOW, kind=AdmissionEventKind.PREEMPTED, cause=PreemptionCause.PRIORITY)
    ]
    return Admission(
        job="team-a/web",
        state=state,
        priority=100,
        queued_at=NOW,
        task_resources=Resources(cpu=100),
        tasks=2,
        least_tasks=2,
        admitted=admitted,
        reason="not enough quota" if state is AdmissionState.QUEUED else "",
        preempted_by="team-a/urgent" if preemptions else None,
        preemptions=preemptions,
        history=history if preemptions else [],
        updated_at=NOW,
    )


def test_a_job_queued_admitted_and_preempted() -> None:
    key = keys.admission("team-a", "web")
    queued, admitted = AdmissionState.QUEUED, AdmissionState.ADMITTED
    source = Admissions()
    assert told(source, key, None, admission(queued)) == [("job.queued", "not enough quota")]
    assert told(source, key, admission(queued), admission(admitted, 2)) == [
        ("job.admitted", "2 of 2 task(s)")
    ]
    assert told(source, key, admission(admitted, 2), admission(admitted, 2)) == []
    preempted = admission(AdmissionState.PREEMPTING, 2, preemptions=1)
    assert told(source, key, admission(admitted, 2), preempted) == [
        ("job.preempted", "by team-a/urgent (priority)")
    ]


def task(state: TaskState, attempt: int = 1, restarts: int = 0) -> Task:
    on = None if state is TaskState.PENDING else "m1"
    return Task(
        job="team-a/web",
        index=3,
        generation=1,
        attempt=attempt,
        machine=on,
        state=state,
        restarts=restarts,
        version="1",
        updated_at=NOW,
    )


def test_a_task_placed_restarted_and_lost() -> None:
    key = keys.task("team-a", "web", 3)
    source = Tasks()
    assert told(source, key, task(TaskState.PENDING), task(TaskState.PLACED)) == [
        ("task.placed", "")
    ]
    restarted = task(TaskState.PLACED, attempt=2, restarts=1)
    assert told(source, key, task(TaskState.PLACED), restarted) == [
        ("task.restarted", "restart 1"),
        ("task.placed", ""),
    ]
    assert told(source, key, task(TaskState.PLACED), task(TaskState.LOST)) == [("task.lost", "")]
    [placed] = source.events(key, None, source.digest(kv(key, task(TaskState.PLACED))), CHANGE)
    assert (placed.job, placed.task, placed.machine, placed.attempt) == ("team-a/web", 3, "m1", 1)


def status(state: TaskState, attempt: int = 1, exit_code: int | None = None) -> TaskStatus:
    return TaskStatus(
        job="team-a/web",
        index=3,
        machine="m1",
        attempt=attempt,
        state=state,
        pid=99 if state is TaskState.RUNNING else None,
        exit_code=exit_code,
        message="bad config" if exit_code else "",
        updated_at=NOW,
    )


def test_a_task_started_and_exited_as_its_agent_reports() -> None:
    key = keys.task_status("team-a", "web", 3)
    source = Statuses()
    running, failed = status(TaskState.RUNNING), status(TaskState.FAILED, exit_code=2)
    assert told(source, key, status(TaskState.STARTING), running) == [("task.started", "pid 99")]
    assert told(source, key, running, running) == []
    assert told(source, key, running, failed) == [("task.exited", "exit code 2: bad config")]
    # The next attempt starting is a start again.
    assert told(source, key, failed, status(TaskState.RUNNING, attempt=2)) == [
        ("task.started", "pid 99")
    ]


def operation(state: OperationState, kind: OperationKind = OperationKind.MOVE) -> TaskOperation:
    return TaskOperation(
        id="op-1",
        kind=kind,
        job="team-a/web",
        tasks=[0, 2],
        reason="rebalance",
        state=state,
        created_at=NOW,
        updated_at=NOW,
        target_machine="m9" if kind is OperationKind.MOVE else None,
    )


@pytest.mark.parametrize(
    ("before", "after", "kinds"),
    [
        (None, OperationState.PENDING_APPROVAL, ["operation.proposed"]),
        (
            OperationState.PENDING_APPROVAL,
            OperationState.APPROVED,
            ["operation.approved"],
        ),
        # Approved and done in one write: both told, in order.
        (
            OperationState.PENDING_APPROVAL,
            OperationState.DONE,
            ["operation.approved", "operation.done"],
        ),
        (None, OperationState.APPROVED, ["operation.proposed", "operation.approved"]),
        (OperationState.APPROVED, OperationState.CANCELLED, ["operation.cancelled"]),
        (OperationState.CANCELLED, OperationState.CANCELLED, []),
        (OperationState.DONE, OperationState.DONE, []),
    ],
)
def test_an_operation_s_states_in_order(
    before: OperationState | None, after: OperationState, kinds: list[str]
) -> None:
    key = keys.operation("team-a", "web", "op-1")
    previous = None if before is None else operation(before)
    assert [kind for kind, _ in told(Operations(), key, previous, operation(after))] == kinds


def test_a_preemption_done_tells_each_task_preempted() -> None:
    key = keys.operation("team-a", "web", "op-1")
    source = Operations()
    approved = operation(OperationState.APPROVED, OperationKind.PREEMPT)
    done = operation(OperationState.DONE, OperationKind.PREEMPT)
    before, after = (source.digest(kv(key, record)) for record in (approved, done))
    events = source.events(key, before, after, CHANGE)
    assert [(e.kind.value, e.task) for e in events] == [
        ("operation.done", None),
        ("task.preempted", 0),
        ("task.preempted", 2),
    ]


def test_a_machine_s_states() -> None:
    key = keys.machine("m1")
    source = Machines()
    up = machine("m1")
    draining = up.model_copy(update={"state": MachineState.DRAINING})
    assert told(source, key, None, up) == [("machine.up", "joined the region")]
    assert told(source, key, up, draining) == [("machine.draining", "was up")]
    assert told(source, key, draining, draining) == []


def test_owners_read_only_the_machine_s_own_allocation_record() -> None:
    owners = Owners()
    owned = Allocation(machine="m1", entitlement="team-a")
    assert owners.digest(kv(keys.allocation("m1"), owned)) == "team-a"
    assert owners.digest(kv(keys.allocation("m1"), Allocation(machine="m1"))) == ""
    entry = keys.allocation("m1") + "/team-a/web/0"
    assert owners.digest(kv(entry, Resources(cpu=1))) is None


def test_an_entitlement_moved_between_shards() -> None:
    key = keys.shard_assignment("team-a")
    assert told(Shards(), key, b"shard-0", b"shard-1") == [("shard.moved", "from shard-0")]
    assert told(Shards(), key, None, b"shard-0") == []


def test_a_record_a_source_cannot_read_is_skipped() -> None:
    assert Jobs().digest(kv(keys.job("team-a", "web"), b"{not json")) is None
