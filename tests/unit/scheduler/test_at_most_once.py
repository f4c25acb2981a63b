"""At-most-once jobs: a task leaves a silent machine only after the fencing period, and is placed
again only once its previous process is known to be dead."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from tests.unit.scheduler.test_reconciler import (
    NOW,
    make_job,
    make_machine,
    make_status,
    make_task,
    make_view,
)
from tether.model import Job, Machine, MachineState, TaskState
from tether.scheduler.plan import JobView, Stored
from tether.scheduler.reconciler import FENCE_MARGIN_S, placement_writes, plan_job

FENCING_S = 10.0
DUE = NOW + timedelta(seconds=FENCING_S + FENCE_MARGIN_S)
"""When the tasks of a machine marked down at NOW may run elsewhere."""


def at_most_once(job: Stored[Job]) -> Stored[Job]:
    spec = job.value.spec.model_copy(update={"at_most_once": True})
    return Stored(job.value.model_copy(update={"spec": spec}), job.revision)


def down(machine_id: str, since: datetime | None = NOW) -> Machine:
    return make_machine(machine_id, MachineState.DOWN).model_copy(update={"down_since": since})


def with_fencing(view: JobView) -> JobView:
    return replace(view, fencing_s=FENCING_S)


def silent_m1_view(job: Stored[Job], *statuses: TaskState) -> JobView:
    """Task 0 runs attempt 2 on m1, which went down at NOW; its status says `statuses[0]`."""
    return with_fencing(
        make_view(
            job,
            make_task(0, "m1", attempt=2),
            statuses=tuple(make_status(0, "m1", 2, state) for state in statuses),
            machines={"m1": down("m1"), "m2": make_machine("m2")},
        )
    )


def test_a_task_stays_on_its_silent_machine_until_the_fencing_period_is_over() -> None:
    view = silent_m1_view(at_most_once(make_job(1)), TaskState.RUNNING)

    waiting = plan_job(view, DUE - timedelta(seconds=1))
    assert (waiting.reclaim, waiting.release, waiting.writes, waiting.place) == ([], [], [], [])
    assert waiting.wake_at == DUE

    plan = plan_job(view, DUE)
    assert (plan.release, plan.writes, plan.place) == ([], [], [])
    [reclaim] = plan.reclaim
    assert reclaim.unassign == "m1"
    # Written only while m1's heartbeat is still missing: a returned agent keeps its task.
    assert reclaim.silent == "m1"
    assert reclaim.task is not None
    assert reclaim.task.state is TaskState.LOST
    assert reclaim.task.machine is None


def test_an_ordinary_job_leaves_the_silent_machine_at_once() -> None:
    plan = plan_job(silent_m1_view(make_job(1), TaskState.RUNNING), NOW)
    assert plan.reclaim == []
    [lost] = plan.release
    assert lost.silent is None
    assert lost.task is not None
    assert lost.task.state is TaskState.LOST


def test_a_task_reported_dead_leaves_at_once() -> None:
    plan = plan_job(silent_m1_view(at_most_once(make_job(1)), TaskState.KILLED), NOW)
    assert plan.reclaim == []
    assert [write.unassign for write in plan.release] == ["m1"]


def test_a_machine_marked_down_by_someone_else_or_gone_is_not_waited_for() -> None:
    job = at_most_once(make_job(1))
    task = make_task(0, "m1", attempt=2)
    marked = with_fencing(make_view(job, task, machines={"m1": down("m1", since=None)}))
    gone = with_fencing(make_view(job, task, machines={}))
    for view in (marked, gone):
        assert [write.silent for write in plan_job(view, NOW).reclaim] == ["m1"]


def test_a_leaving_task_on_a_silent_machine_is_reclaimed_before_it_is_deleted() -> None:
    job = at_most_once(make_job(1))
    view = with_fencing(
        make_view(
            job,
            make_task(0, "m2", attempt=1),
            make_task(1, "m1", attempt=2),
            machines={"m1": down("m1"), "m2": make_machine("m2")},
        )
    )
    waiting = plan_job(view, NOW)
    assert (waiting.reclaim, waiting.release) == ([], [])
    assert waiting.wake_at == DUE

    [reclaim] = plan_job(view, DUE).reclaim
    assert (reclaim.index, reclaim.silent) == (1, "m1")
    assert reclaim.task is not None
    after = with_fencing(make_view(job, make_task(0, "m2", attempt=1), Stored(reclaim.task, 300)))
    [deleted] = plan_job(after, DUE).release
    assert (deleted.index, deleted.task) == (1, None)


def test_a_moved_task_is_placed_only_once_its_old_process_is_reported_dead() -> None:
    job = at_most_once(make_job(1))
    unplaced = make_task(0, attempt=2)

    def placed_with(status_state: TaskState, machine: Machine) -> tuple[list[int], datetime | None]:
        view = with_fencing(
            make_view(
                job,
                unplaced,
                statuses=(make_status(0, machine.id, 2, status_state),),
                machines={machine.id: machine},
            )
        )
        plan = plan_job(view, NOW + timedelta(seconds=1))
        return plan.place, plan.wake_at

    # Moved off an up machine: the agent is stopping the old process.
    assert placed_with(TaskState.RUNNING, make_machine("m1")) == ([], None)
    assert placed_with(TaskState.KILLED, make_machine("m1")) == ([0], None)
    # Its machine went down meanwhile: the fencing period decides.
    assert placed_with(TaskState.RUNNING, down("m1")) == ([], DUE)
    assert placed_with(TaskState.RUNNING, down("m1", since=NOW - timedelta(minutes=1))) == (
        [0],
        None,
    )
    # An ordinary job does not wait.
    ordinary = make_view(
        make_job(1), unplaced, statuses=(make_status(0, "m1", 2, TaskState.RUNNING),)
    )
    assert plan_job(ordinary, NOW).place == [0]


def test_a_new_task_whose_old_process_may_run_is_created_pending_not_placed() -> None:
    # A preempted task's status outlives it; the job's index comes back while that process
    # may still run on its up machine.
    def plan_with(job: Stored[Job], status_state: TaskState) -> tuple[list[int], list[int]]:
        view = make_view(
            job,
            statuses=(make_status(0, "m1", 2, status_state),),
            machines={"m1": make_machine("m1")},
        )
        plan = plan_job(view, NOW)
        return [write.index for write in plan.writes], [write.index for write in plan.create]

    assert plan_with(at_most_once(make_job(1)), TaskState.RUNNING) == ([0], [])
    assert plan_with(at_most_once(make_job(1)), TaskState.KILLED) == ([], [0])
    assert plan_with(make_job(1), TaskState.RUNNING) == ([], [0])


def test_assignments_of_an_at_most_once_job_say_so() -> None:
    job = at_most_once(make_job(1))
    view = make_view(job, make_task(0, attempt=1))
    [write] = placement_writes(view, {0: "m1"}, NOW)
    assert write.assignment is not None
    assert write.assignment[1].at_most_once
    [ordinary] = placement_writes(make_view(make_job(1), make_task(0, attempt=1)), {0: "m1"}, NOW)
    assert ordinary.assignment is not None
    assert not ordinary.assignment[1].at_most_once
