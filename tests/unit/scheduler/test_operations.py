"""Moves for maintenance and restarts on request as task operations: proposed with a deadline,
executed when approved or when the deadline comes, withdrawn when they no longer apply, and
announced to the controller as advance notices (pure functions, no I/O)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from tests.unit.scheduler.test_reconciler import NOW, make_job, make_view
from tests.unit.scheduler.test_updates import running, with_operations
from tether.model import (
    AdvanceNotice,
    DesiredState,
    MaintenanceKind,
    OperationKind,
    OperationState,
    TaskOperation,
    TaskState,
)
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.scheduler.operations import maintenance_id
from tether.scheduler.plan import JobView, Stored
from tether.scheduler.reconciler import placement_writes, plan_job
from tether.scheduler.taskcontrol import Pending, control_request

START = NOW + timedelta(hours=1)


def notice(machine: str = "m1", start: timedelta = timedelta(hours=1)) -> AdvanceNotice:
    return AdvanceNotice(
        id="n-1",
        machines=[machine],
        start=NOW + start,
        duration_s=1800,
        kind=MaintenanceKind.REBOOT,
        reason="kernel",
    )


def region_view(count: int, *notices: AdvanceNotice) -> JobView:
    tasks, statuses = running(count)  # task i runs on m1 for even i, m2 for odd i, attempt 3
    maintenance: dict[str, list[AdvanceNotice]] = {}
    for scheduled in notices:
        for machine in scheduled.machines:
            maintenance.setdefault(machine, []).append(scheduled)
    return replace(
        make_view(make_job(count), *tasks, statuses=tuple(statuses)), maintenance=maintenance
    )


def stored_operation(
    kind: OperationKind, operation_id: str, index: int, state: OperationState, **fields: Any
) -> Stored[TaskOperation]:
    """One task's operation of `kind`, stored at revision 700 + index."""
    operation = TaskOperation(
        id=operation_id,
        kind=kind,
        job="ads/web",
        tasks=[index],
        reason=str(kind),
        state=state,
        created_at=NOW,
        updated_at=NOW,
        **fields,
    )
    return Stored(operation, 700 + index)


def move(
    view: JobView, index: int, state: OperationState, scheduled: AdvanceNotice
) -> Stored[TaskOperation]:
    attempt = view.tasks[index].value.attempt
    operation_id = maintenance_id(scheduled, index, attempt)
    return stored_operation(
        OperationKind.MOVE,
        operation_id,
        index,
        state,
        deadline=scheduled.start,
        attempt=attempt,
        notice=scheduled.id,
    )


def restart(index: int, attempt: int, state: OperationState) -> Stored[TaskOperation]:
    return stored_operation(
        OperationKind.RESTART, f"restart-abc-t{index}", index, state, attempt=attempt
    )


def test_tasks_on_machines_with_maintenance_ahead_get_a_move_due_at_its_start() -> None:
    view = region_view(4, notice("m1"))
    plan = plan_job(view, NOW)
    proposed = {w.operation.tasks[0]: w.operation for w in plan.operations}
    assert set(proposed) == {0, 2}  # the tasks on m1
    for index, operation in proposed.items():
        assert operation.kind is OperationKind.MOVE
        assert operation.deadline == START
        assert operation.notice == "n-1"
        assert operation.attempt == 3
        assert operation.id == maintenance_id(notice("m1"), index, 3)
        assert "reboot maintenance of machine m1" in operation.reason
    assert plan.wake_at == START
    assert not plan.release
    assert not plan.writes


def test_a_harvest_shrink_moves_only_the_tasks_it_names() -> None:
    # Tasks 0 and 2 run on m1; the shrink leaves room for task 0 only.
    shrink = notice("m1").model_copy(
        update={"kind": MaintenanceKind.HARVEST_SHRINK, "tasks": ["ads/web/2"]}
    )
    plan = plan_job(region_view(4, shrink), NOW)
    [operation] = [w.operation for w in plan.operations]
    assert (operation.kind, operation.tasks, operation.deadline) == (
        OperationKind.MOVE,
        [2],
        START,
    )
    assert "harvest-shrink" in operation.reason


def test_an_approved_move_releases_the_task_from_its_machine_and_is_done() -> None:
    view = region_view(2, notice("m1"))
    view = with_operations(view, move(view, 0, OperationState.APPROVED, notice("m1")))
    plan = plan_job(view, NOW)
    [release] = plan.release
    assert release.index == 0
    assert release.unassign == "m1"
    assert release.task is not None
    assert (release.task.machine, release.task.state) == (None, TaskState.PENDING)
    assert "moved off m1" in release.task.message
    assert release.operation is not None
    assert release.operation.operation.state is OperationState.DONE
    assert release.operation.revision == 700


def rebalance(view: JobView, index: int, state: OperationState) -> Stored[TaskOperation]:
    """A move another service proposed (the rebalancer): a target, no notice, no deadline."""
    attempt = view.tasks[index].value.attempt
    return stored_operation(
        OperationKind.MOVE,
        f"rebalance-t{index}",
        index,
        state,
        attempt=attempt,
        target_machine="m3",
    )


def test_a_move_without_a_deadline_waits_for_its_approval_as_long_as_it_takes() -> None:
    view = region_view(2)
    view = with_operations(view, rebalance(view, 0, OperationState.PENDING_APPROVAL))
    later = plan_job(view, NOW + timedelta(days=30))
    assert (later.release, later.operations, later.wake_at) == ([], [], None)


def test_an_approved_move_with_a_target_releases_the_task_to_go_there() -> None:
    view = region_view(2)
    view = with_operations(view, rebalance(view, 1, OperationState.APPROVED))
    [release] = plan_job(view, NOW).release
    assert release.task is not None
    assert (release.index, release.unassign, release.task.move_to) == (1, "m2", "m3")
    # Placed (wherever the allocator put it), the task forgets where the move asked to go.
    moved = replace(view, tasks={**view.tasks, 1: Stored(release.task, 900)})
    [placed] = placement_writes(moved, {1: "m3"}, NOW)
    assert placed.task is not None
    assert (placed.task.machine, placed.task.move_to) == ("m3", None)


def test_a_move_nobody_approved_is_executed_at_its_deadline() -> None:
    view = region_view(2, notice("m1"))
    view = with_operations(view, move(view, 0, OperationState.PENDING_APPROVAL, notice("m1")))
    before = plan_job(view, START - timedelta(seconds=1))
    assert not before.release
    assert before.wake_at == START
    at_start = plan_job(view, START)
    assert [w.index for w in at_start.release] == [0]


def test_maintenance_already_under_way_moves_its_tasks_at_once() -> None:
    started = notice("m1", start=-timedelta(minutes=5))
    plan = plan_job(region_view(2, started), NOW)
    [release] = plan.release
    assert release.index == 0
    assert release.operation is not None
    # Never proposed: written done, where no operation exists yet.
    assert release.operation.revision == 0
    assert release.operation.operation.state is OperationState.DONE
    assert plan.operations == []


def test_maintenance_that_is_over_or_cancelled_moves_nothing() -> None:
    over = notice("m1", start=-timedelta(hours=2))  # 30 minutes long
    assert plan_job(region_view(2, over), NOW).operations == []
    # Cancelled: the notice is gone, so its open move is withdrawn.
    view = region_view(2)
    view = with_operations(view, move(view, 0, OperationState.APPROVED, notice("m1")))
    plan = plan_job(view, NOW)
    assert not plan.release
    [withdrawn] = plan.operations
    assert withdrawn.operation.state is OperationState.CANCELLED


def test_an_approved_restart_makes_a_new_attempt_in_place_without_counting_a_failure() -> None:
    view = with_operations(region_view(2), restart(1, 3, OperationState.APPROVED))
    plan = plan_job(view, NOW)
    [write] = plan.writes
    assert write.task is not None
    assert (write.task.machine, write.task.attempt, write.task.restarts) == ("m2", 4, 0)
    assert write.task.message == "restarted: restart"
    assert write.operation is not None
    assert write.operation.operation.state is OperationState.DONE


def test_a_restart_of_an_attempt_that_is_gone_is_withdrawn() -> None:
    view = with_operations(region_view(2), restart(1, 2, OperationState.APPROVED))
    plan = plan_job(view, NOW)
    assert plan.writes == []
    [withdrawn] = plan.operations
    assert withdrawn.operation.state is OperationState.CANCELLED


def test_one_operation_per_task_executes_in_a_plan() -> None:
    view = region_view(2, notice("m1"))
    view = with_operations(
        view,
        restart(0, 3, OperationState.APPROVED),
        move(view, 0, OperationState.APPROVED, notice("m1")),
    )
    plan = plan_job(view, NOW)
    assert len(plan.writes) + len(plan.release) == 1


def test_the_controller_hears_of_maintenance_on_its_tasks_machines_only() -> None:
    elsewhere = AdvanceNotice(
        id="n-2",
        machines=["m9"],
        start=START,
        duration_s=60,
        kind=MaintenanceKind.POWER,
    )
    scheduled = notice("m1").model_copy(update={"machines": ["m1", "m7"]})
    view = region_view(4, scheduled, elsewhere)
    request = control_request(view, Pending.of(view), 1, NOW)
    [announced] = request.advance_notices
    assert announced.id == "n-1"
    assert list(announced.machine_ids) == ["m1"]
    assert [task.index for task in announced.affected_tasks] == [0, 2]
    assert announced.start.ToDatetime().replace(tzinfo=START.tzinfo) == START
    assert announced.duration.seconds == 1800
    assert announced.reason == "kernel"


def shrunk(view: JobView, count: int, *, controlled: bool) -> JobView:
    job = view.job.value
    spec = job.spec.model_copy(update={"count": count})
    smaller = Stored(job.model_copy(update={"spec": spec}), view.job.revision)
    return replace(view, job=smaller, controlled=controlled)


def test_shrinking_a_job_with_a_controller_asks_to_stop_the_removed_tasks() -> None:
    plan = plan_job(shrunk(region_view(4), 2, controlled=True), NOW)
    assert not plan.writes
    assert not plan.release
    stops = [w.operation for w in plan.operations]
    assert [(o.kind, o.tasks, o.attempt) for o in stops] == [
        (OperationKind.STOP, [2], 3),
        (OperationKind.STOP, [3], 3),
    ]


def test_shrinking_without_a_controller_or_deleting_stops_at_once() -> None:
    for view in (
        shrunk(region_view(4), 2, controlled=False),
        replace(region_view(4), controlled=True, job=make_job(4, deleting=True)),
    ):
        plan = plan_job(view, NOW)
        assert plan.operations == []
        assert {w.index for w in plan.writes if w.task is not None} >= {2, 3}


def stop(index: int, state: OperationState) -> Stored[TaskOperation]:
    return stored_operation(OperationKind.STOP, f"stop-a3-t{index}", index, state, attempt=3)


def test_an_approved_stop_stops_its_task_and_a_scale_back_up_withdraws_the_rest() -> None:
    view = with_operations(
        shrunk(region_view(4), 2, controlled=True),
        stop(2, OperationState.APPROVED),
        stop(3, OperationState.PENDING_APPROVAL),
    )
    plan = plan_job(view, NOW)
    [write] = plan.writes
    assert write.index == 2
    assert write.task is not None
    assert write.task.desired is DesiredState.STOPPED
    assert write.assignment is not None
    assert write.assignment[1].desired is DesiredState.STOPPED
    assert write.operation is not None
    assert write.operation.operation.state is OperationState.DONE
    assert plan.operations == []  # task 3 keeps waiting for its approval

    grown_back = replace(view, job=make_job(4))
    withdrawn = plan_job(grown_back, NOW).operations
    assert {w.operation.id for w in withdrawn} == {"stop-a3-t2", "stop-a3-t3"}
    assert {w.operation.state for w in withdrawn} == {OperationState.CANCELLED}


@pytest.mark.parametrize("kind", list(MaintenanceKind))
def test_the_controller_hears_of_every_kind_of_maintenance(kind: MaintenanceKind) -> None:
    # Drains and decommissions are notices too: a kind without a wire value would fail every
    # request of a job with a task on such a machine.
    view = region_view(2, notice("m1").model_copy(update={"kind": kind}))
    [announced] = control_request(view, Pending.of(view), 1, NOW).advance_notices
    assert pb.MaintenanceKind.Name(announced.kind) == f"MAINTENANCE_KIND_{kind.name}"
