"""Planning only the tasks that changed: for any job, the plans of the parts of any partition of
its task indexes add up to the plan of the whole job, so a leader that plans a job's changed
tasks alone does what planning the whole job would have done for them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.scheduler.test_operations import stored_operation
from tests.unit.scheduler.test_reconciler import (
    NOW,
    make_job,
    make_machine,
    make_status,
    make_task,
    make_view,
)
from tether.model import (
    ON_MACHINE_STATES,
    DesiredState,
    JobKind,
    MachineState,
    OperationKind,
    OperationState,
    RestartMode,
    TaskState,
)
from tether.model.admission import Admission
from tether.scheduler.plan import JobView, Plan
from tether.scheduler.reconciler import plan_job

MACHINES = {
    "m1": make_machine("m1"),
    "m2": make_machine("m2"),
    "m3": make_machine("m3", MachineState.DOWN),
}
# "m4" is not in the inventory: a machine removed, or one the view has not heard of yet.
MACHINE_NAMES = (None, "m1", "m2", "m3", "m4")
MOST = 6
OFF_MACHINE_STATES = set(TaskState) - ON_MACHINE_STATES


@st.composite
def job_views(draw: st.DrawFn) -> JobView:
    """A job of up to MOST tasks in every state the planner tells apart: tasks on up, down and
    unknown machines or none, statuses of this or an older attempt (or of no task), open and
    closed operations, admitted in part, shrunk or deleting."""
    count = draw(st.integers(1, MOST))
    job = make_job(
        count,
        mode=draw(st.sampled_from(RestartMode)),
        kind=draw(st.sampled_from(JobKind)),
        deleting=draw(st.booleans()),
        max_restarts=draw(st.integers(0, 2)),
    )
    if draw(st.booleans()):
        spec = job.value.spec.model_copy(update={"at_most_once": True})
        job = replace(job, value=job.value.model_copy(update={"spec": spec}))
    tasks, statuses = [], []
    for index in range(MOST + 2):
        machine = draw(st.sampled_from(MACHINE_NAMES))
        attempt = draw(st.integers(1, 3))
        if draw(st.booleans()):
            state = None if machine else draw(st.sampled_from(sorted(OFF_MACHINE_STATES)))
            tasks.append(
                make_task(
                    index,
                    machine,
                    state=state,
                    attempt=attempt,
                    restarts=draw(st.integers(0, 3)),
                    desired=draw(st.sampled_from(DesiredState)),
                    revision=draw(st.sampled_from((0, 50_000))),
                )
            )
        if draw(st.booleans()):
            finished_ago = timedelta(seconds=draw(st.sampled_from((0, 30, 3600))))
            statuses.append(
                make_status(
                    index,
                    machine or "m1",
                    attempt - draw(st.integers(0, 1)),
                    draw(st.sampled_from(TaskState)),
                    exit_code=draw(st.sampled_from((None, 0, 3))),
                    finished_at=NOW - finished_ago,
                )
            )
    operations = [
        stored_operation(
            OperationKind.RESTART,
            f"restart-{number}-t{index}",
            index,
            draw(st.sampled_from(OperationState)),
            attempt=draw(st.integers(1, 3)),
        )
        for number, index in enumerate(draw(st.lists(st.integers(0, MOST + 1), max_size=3)))
    ]
    view = make_view(job, *tasks, statuses=tuple(statuses), machines=MACHINES)
    admission = None
    if draw(st.booleans()):
        admission = Admission.of(job.value.spec, NOW).model_copy(
            update={"admitted": draw(st.integers(0, count))}
        )
    return replace(
        view,
        operations={stored.value.id: stored for stored in operations},
        controlled=draw(st.booleans()),
        admission=admission,
        revision=60_000,
    )


def _writes(plan: Plan) -> dict[str, list[Any]]:
    """The plan's actions by kind, in an order that does not depend on how it was split."""
    return {
        "reclaim": sorted(plan.reclaim, key=repr),
        "release": sorted(plan.release, key=repr),
        "writes": sorted(plan.writes, key=repr),
        "place": sorted(plan.place),
        "create": sorted(plan.create, key=repr),
        "operations": sorted(plan.operations, key=repr),
    }


def _indexes(view: JobView) -> set[int]:
    """Every index the job's records, count or operations name."""
    named = {index for stored in view.operations.values() for index in stored.value.tasks}
    return set(view.tasks) | set(view.statuses) | set(range(view.job.value.spec.count)) | named


@settings(max_examples=300, deadline=None)
@given(job_views(), st.data())
def test_the_plans_of_a_partition_of_the_tasks_add_up_to_the_plan_of_the_whole_job(
    view: JobView, data: st.DataObject
) -> None:
    whole = plan_job(view, NOW)
    parts = data.draw(st.lists(st.integers(0, 2), min_size=MOST + 2, max_size=MOST + 2))
    groups: dict[int, set[int]] = {}
    for index in _indexes(view):
        groups.setdefault(parts[index], set()).add(index)
    plans = [plan_job(view, NOW, changed) for changed in groups.values()]

    joined = Plan()
    for plan in plans:
        joined.reclaim += plan.reclaim
        joined.release += plan.release
        joined.writes += plan.writes
        joined.place += plan.place
        joined.create += plan.create
        joined.operations += plan.operations
        if plan.wake_at is not None:
            joined.wake(plan.wake_at)
        assert plan.delete_job == whole.delete_job
    assert _writes(joined) == _writes(whole)
    assert joined.wake_at == whole.wake_at


def test_a_task_left_out_of_the_changed_ones_is_not_planned() -> None:
    view = make_view(make_job(2), make_task(0), make_task(1))

    assert plan_job(view, NOW).place == [0, 1]
    assert plan_job(view, NOW, {1}).place == [1]
    assert plan_job(view, NOW, set()).place == []


def test_a_missing_task_that_changed_is_created_again() -> None:
    view = make_view(make_job(2), make_task(0))

    created = plan_job(view, NOW, {1}).create

    assert [(write.index, write.revision) for write in created] == [(1, 0)]
    assert created[0].task is not None
    assert created[0].task.state is TaskState.PENDING
