"""Rolling updates as task operations: proposing, executing and withdrawing them, and the
built-in approval rule (pure functions, no I/O)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from tests.unit.scheduler.test_reconciler import (
    NOW,
    make_job,
    make_status,
    make_task,
    make_view,
)
from tether.model import (
    Job,
    OperationKind,
    OperationState,
    Task,
    TaskOperation,
    TaskState,
    TaskStatus,
    UpdatePolicy,
)
from tether.scheduler.operations import update_id
from tether.scheduler.plan import JobView, Stored
from tether.scheduler.reconciler import plan_job
from tether.scheduler.taskcontrol import Pending, control_request, default_acks


def updated_job(count: int, version: str = "2.0", max_unavailable: int = 10) -> Stored[Job]:
    stored = make_job(count, generation=2)
    job = stored.value
    spec = job.spec.model_copy(
        update={
            "task": job.spec.task.model_copy(update={"version": version}),
            "update": UpdatePolicy(max_unavailable_percent=max_unavailable),
        }
    )
    return Stored(job.model_copy(update={"spec": spec}), stored.revision)


def running(
    count: int, *, down: tuple[int, ...] = ()
) -> tuple[list[Stored[Task]], list[TaskStatus]]:
    tasks = [
        make_task(i, f"m{1 + i % 2}", attempt=3, state=TaskState.RUNNING) for i in range(count)
    ]
    # The down ones failed an hour ago: their restart backoff is over.
    statuses = [
        make_status(i, f"m{1 + i % 2}", 3, TaskState.FAILED, finished_at=NOW - timedelta(hours=1))
        if i in down
        else make_status(i, f"m{1 + i % 2}", 3, TaskState.RUNNING)
        for i in range(count)
    ]
    return tasks, statuses


def operation(index: int, state: OperationState, version: str = "2.0") -> Stored[TaskOperation]:
    return Stored(
        TaskOperation(
            id=update_id(version, index),
            kind=OperationKind.UPDATE,
            job="ads/web",
            tasks=[index],
            reason="update",
            state=state,
            created_at=NOW,
            updated_at=NOW,
            target_version=version,
        ),
        500 + index,
    )


def with_operations(view: JobView, *operations: Stored[TaskOperation]) -> JobView:
    return replace(view, operations={o.value.id: o for o in operations})


def test_healthy_tasks_on_an_old_version_get_one_update_operation_each() -> None:
    tasks, statuses = running(3, down=(1,))
    view = make_view(updated_job(3), *tasks, statuses=tuple(statuses))
    plan = plan_job(view, NOW)
    proposed = {write.operation.tasks[0]: write for write in plan.operations}
    # Task 1 failed: its restart runs 2.0 without an operation (failures are not operations).
    assert sorted(proposed) == [0, 2]
    assert all(write.revision == 0 for write in proposed.values())
    assert {w.operation.state for w in proposed.values()} == {OperationState.PENDING_APPROVAL}
    assert proposed[0].operation.target_version == "2.0"
    restarted = [w for w in plan.writes if w.index == 1]
    assert len(restarted) == 1
    assert restarted[0].task is not None
    assert restarted[0].task.version == "2.0"
    # Proposed once: the same plan again proposes nothing new.
    again = plan_job(
        with_operations(
            view,
            operation(0, OperationState.PENDING_APPROVAL),
            operation(2, OperationState.PENDING_APPROVAL),
        ),
        NOW,
    )
    assert again.operations == []
    assert [w.index for w in again.writes] == [1]


def test_an_approved_operation_restarts_its_task_on_the_new_version_and_is_done() -> None:
    tasks, statuses = running(2)
    view = with_operations(
        make_view(updated_job(2), *tasks, statuses=tuple(statuses)),
        operation(0, OperationState.APPROVED),
        operation(1, OperationState.PENDING_APPROVAL),
    )
    plan = plan_job(view, NOW)
    [write] = plan.writes
    assert write.index == 0
    assert write.task is not None
    assert (write.task.version, write.task.attempt, write.task.state) == (
        "2.0",
        4,
        TaskState.PLACED,
    )
    assert write.operation is not None
    assert write.operation.operation.state is OperationState.DONE
    assert write.operation.revision == 500
    assert plan.operations == []


def test_operations_the_job_or_the_task_overtook_are_withdrawn() -> None:
    tasks, statuses = running(2)
    # Task 0 already runs 2.0 (it failed and restarted); task 1's operation targets 1.5, an
    # older rollout; a third operation names a task that is gone.
    tasks[0] = Stored(tasks[0].value.model_copy(update={"version": "2.0"}), tasks[0].revision)
    view = with_operations(
        make_view(updated_job(2), *tasks, statuses=tuple(statuses)),
        operation(0, OperationState.PENDING_APPROVAL),
        operation(1, OperationState.APPROVED, version="1.5"),
        operation(7, OperationState.PENDING_APPROVAL),
    )
    plan = plan_job(view, NOW)
    cancelled = {
        w.operation.id for w in plan.operations if w.operation.state is OperationState.CANCELLED
    }
    assert cancelled == {update_id("2.0", 0), update_id("1.5", 1), update_id("2.0", 7)}
    proposed = [w.operation.id for w in plan.operations if w.revision == 0]
    assert proposed == [update_id("2.0", 1)]
    assert plan.writes == []


def test_the_default_rule_keeps_at_most_max_unavailable_down() -> None:
    tasks, statuses = running(20, down=(3,))
    view = with_operations(
        make_view(updated_job(20, max_unavailable=20), *tasks, statuses=tuple(statuses)),
        operation(0, OperationState.APPROVED),
        *(operation(i, OperationState.PENDING_APPROVAL) for i in (5, 6, 7, 8)),
    )
    # 20% of 20 is 4: task 3 is down and task 0 is approved, so two more may go.
    assert default_acks(view, Pending.of(view)) == [update_id("2.0", 5), update_id("2.0", 6)]
    # At least one at a time, even for a tiny share of a small job.
    small_tasks, small_statuses = running(3)
    small = with_operations(
        make_view(updated_job(3, max_unavailable=1), *small_tasks, statuses=tuple(small_statuses)),
        operation(2, OperationState.PENDING_APPROVAL),
        operation(1, OperationState.PENDING_APPROVAL),
    )
    assert len(default_acks(small, Pending.of(small))) == 1


def test_the_controller_request_has_the_full_picture() -> None:
    tasks, statuses = running(3, down=(2,))
    done = operation(1, OperationState.DONE)
    view = with_operations(
        make_view(updated_job(3), *tasks, statuses=tuple(statuses)),
        operation(0, OperationState.PENDING_APPROVAL),
        done,
    )
    request = control_request(view, Pending.of(view), 42, NOW)
    assert (request.job_handle, request.sequence_number, request.task_count) == ("ads/web", 42, 3)
    [pending] = request.pending_operations
    assert (pending.id, pending.target_version) == (update_id("2.0", 0), "2.0")
    assert [(t.index, t.machine_id) for t in pending.tasks] == [(0, "m1")]
    assert [o.id for o in request.completed_operations] == [done.value.id]
    assert [u.task.index for u in request.all_unhealthy_tasks] == [2]
