"""The leader's per-job decisions, on hand-built records (no store, no allocator)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tether.model import (
    DesiredState,
    Job,
    JobKind,
    JobSpec,
    Machine,
    MachineState,
    OperationKind,
    OperationState,
    Resources,
    RestartMode,
    RestartPolicy,
    Task,
    TaskState,
    TaskStatus,
    TaskTemplate,
    Topology,
)
from tether.model.admission import Admission, AdmissionState
from tether.scheduler.executor import preempted_for_another
from tether.scheduler.plan import JobView, Plan, Stored, TaskWrite
from tether.scheduler.reconciler import (
    backoff_s,
    placement_writes,
    plan_job,
    request_id,
    unplaced_writes,
)

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
HANDLE = "ads/web"


def make_job(
    count: int = 2,
    *,
    mode: RestartMode = RestartMode.ALWAYS,
    max_restarts: int = 3,
    kind: JobKind = JobKind.SERVICE,
    deleting: bool = False,
    generation: int = 1,
) -> Stored[Job]:
    template = TaskTemplate(
        package="web",
        version="1.0",
        command="python",
        resources=Resources(cpu=100, memory_mib=64),
        restart=RestartPolicy(
            mode=mode, max_restarts=max_restarts, backoff_initial_s=1.0, backoff_max_s=60.0
        ),
    )
    spec = JobSpec(name="web", entitlement="ads", count=count, task=template, kind=kind)
    job = Job(spec=spec, generation=generation, created_at=NOW, updated_at=NOW, deleting=deleting)
    return Stored(job, 7)


def make_task(
    index: int,
    machine: str | None = None,
    *,
    state: TaskState | None = None,
    attempt: int = 0,
    restarts: int = 0,
    desired: DesiredState = DesiredState.RUNNING,
    message: str = "",
    revision: int = 0,
) -> Stored[Task]:
    task = Task(
        job=HANDLE,
        index=index,
        generation=1,
        attempt=attempt,
        machine=machine,
        desired=desired,
        state=state or (TaskState.PLACED if machine else TaskState.PENDING),
        restarts=restarts,
        version="1.0",
        message=message,
        updated_at=NOW,
    )
    return Stored(task, revision or 100 + index)


def make_status(
    index: int,
    machine: str,
    attempt: int,
    state: TaskState,
    *,
    exit_code: int | None = None,
    finished_at: datetime = NOW,
    progress: float | None = None,
) -> TaskStatus:
    return TaskStatus(
        progress=progress,
        job=HANDLE,
        index=index,
        machine=machine,
        attempt=attempt,
        state=state,
        exit_code=exit_code,
        finished_at=finished_at if state in (TaskState.EXITED, TaskState.FAILED) else None,
        updated_at=finished_at,
    )


def make_machine(machine_id: str, state: MachineState = MachineState.UP) -> Machine:
    return Machine(
        id=machine_id,
        hostname=f"{machine_id}.local",
        topology=Topology(region="r", dc="dc1", msb="msb1", rack="rack1"),
        hardware_type="std",
        capacity=Resources(cpu=4000, memory_mib=4096),
        state=state,
    )


UP_MACHINES = {m: make_machine(m) for m in ("m1", "m2")}


def make_view(
    job: Stored[Job],
    *tasks: Stored[Task],
    statuses: tuple[TaskStatus, ...] = (),
    machines: dict[str, Machine] | None = None,
    machines_revision: int = 10_000,
) -> JobView:
    return JobView(
        job=job,
        tasks={stored.value.index: stored for stored in tasks},
        statuses={status.index: status for status in statuses},
        machines=UP_MACHINES if machines is None else machines,
        machines_revision=machines_revision,
    )


def only_write(plan: Plan) -> TaskWrite:
    assert not plan.release
    assert not plan.place
    assert len(plan.writes) == 1
    return plan.writes[0]


def is_idle(plan: Plan) -> bool:
    return not (plan.writes or plan.release or plan.place or plan.create or plan.delete_job)


def test_missing_tasks_are_created_pending_with_the_jobs_generation_and_placed_at_once() -> None:
    view = make_view(make_job(3, generation=4), make_task(1))

    plan = plan_job(view, NOW)

    assert plan.writes == []
    assert [write.index for write in plan.create] == [0, 2]
    for write in plan.create:
        assert write.revision == 0  # created only if still missing
        assert write.task is not None
        assert write.task.state is TaskState.PENDING
        assert write.task.machine is None
        assert write.task.generation == 4
        assert write.task.version == "1.0"
        assert write.assignment is None
    assert plan.place == [1]


def test_a_task_created_again_never_reuses_an_attempt_of_its_previous_incarnation() -> None:
    # The task's previous incarnation was deleted at revision 40 or before; the view is at 41.
    view = replace(make_view(make_job(1)), revision=41)

    created = created_task(plan_job(view, NOW))

    assert created.attempt == 41
    placed = placement_writes(make_view(make_job(1), Stored(created, 42)), {0: "m1"}, NOW)
    assert placed[0].task is not None
    assert placed[0].task.attempt == 42
    assert placed[0].assignment is not None
    assert placed[0].assignment[1].attempt == 42


def created_task(plan: Plan) -> Task:
    assert len(plan.create) == 1
    task = plan.create[0].task
    assert task is not None
    return task


def test_pending_tasks_are_placed_as_a_new_attempt_with_an_assignment() -> None:
    view = make_view(make_job(2, generation=3), make_task(0), make_task(1, attempt=2))

    plan = plan_job(view, NOW)
    assert plan.place == [0, 1]
    assert not plan.writes

    placed = placement_writes(view, {0: "m2"}, NOW)
    assert len(placed) == 1
    write = placed[0]
    assert write.index == 0
    assert write.revision == 100
    assert write.task is not None
    assert write.task.machine == "m2"
    assert write.task.state is TaskState.PLACED
    assert write.task.attempt == 1
    assert write.task.generation == 3
    assert write.assignment is not None
    machine, assignment = write.assignment
    assert machine == "m2"
    assert (assignment.job, assignment.index, assignment.attempt) == (HANDLE, 0, 1)
    assert assignment.desired is DesiredState.RUNNING
    assert assignment.template == view.job.value.spec.task

    unplaced = unplaced_writes(view, {1: "no machine with 64 MiB free"}, NOW)
    assert [(w.index, w.task.message if w.task else None) for w in unplaced] == [
        (1, "no machine with 64 MiB free")
    ]
    assert unplaced[0].task is not None
    assert unplaced[0].task.machine is None
    assert unplaced[0].assignment is None


def test_unplaced_task_with_the_same_reason_is_not_rewritten() -> None:
    view = make_view(make_job(1), make_task(0, message="full"))
    assert unplaced_writes(view, {0: "full"}, NOW) == []


def test_request_id_names_the_generation_tasks_attempts_and_nonce() -> None:
    first = make_view(make_job(2), make_task(0), make_task(1))
    retried = make_view(make_job(2), make_task(1), make_task(0))
    later = make_view(make_job(2), make_task(0, attempt=1), make_task(1))
    assert request_id(first, [1, 0], "n1") == request_id(retried, [0, 1], "n1")
    assert request_id(first, [0, 1], "n1") != request_id(later, [0, 1], "n1")
    assert request_id(first, [0, 1], "n1") != request_id(first, [0, 1], "n2")
    assert request_id(first, [0, 1], "n1").startswith(f"{HANDLE}:1:")


def test_failed_task_restarts_in_place_after_exponential_backoff() -> None:
    task = make_task(0, "m1", attempt=3, restarts=2)
    status = make_status(0, "m1", 3, TaskState.FAILED, exit_code=2)
    view = make_view(make_job(1), task, statuses=(status,))

    # backoff_initial_s * 2**restarts = 4 s after finished_at.
    early = plan_job(view, NOW + timedelta(seconds=3.9))
    assert is_idle(early)
    assert early.wake_at == NOW + timedelta(seconds=4)

    write = only_write(plan_job(view, NOW + timedelta(seconds=4)))
    assert write.revision == task.revision
    assert write.task is not None
    assert write.task.machine == "m1"
    assert write.task.attempt == 4
    assert write.task.restarts == 3
    assert write.task.state is TaskState.PLACED
    assert "exit code 2" in write.task.message
    assert write.assignment is not None
    assert write.assignment[0] == "m1"
    assert write.assignment[1].attempt == 4
    assert write.unassign is None


def test_backoff_is_capped_at_the_maximum() -> None:
    policy = RestartPolicy(backoff_initial_s=0.5, backoff_max_s=30.0)
    assert backoff_s(policy, 0) == 0.5
    assert backoff_s(policy, 3) == 4.0
    assert backoff_s(policy, 6) == 30.0
    assert backoff_s(policy, 10_000) == 30.0


@pytest.mark.parametrize(
    ("mode", "finished", "restarts"),
    [
        (RestartMode.ALWAYS, TaskState.EXITED, True),
        (RestartMode.ALWAYS, TaskState.FAILED, True),
        (RestartMode.ON_FAILURE, TaskState.EXITED, False),
        (RestartMode.ON_FAILURE, TaskState.FAILED, True),
        (RestartMode.ON_FAILURE, TaskState.KILLED, True),
        (RestartMode.NEVER, TaskState.EXITED, False),
        (RestartMode.NEVER, TaskState.FAILED, False),
    ],
)
def test_restart_policy_mode(mode: RestartMode, finished: TaskState, restarts: bool) -> None:
    status = make_status(0, "m1", 1, finished, exit_code=0 if finished is TaskState.EXITED else 1)
    view = make_view(make_job(1, mode=mode), make_task(0, "m1", attempt=1), statuses=(status,))

    plan = plan_job(view, NOW + timedelta(minutes=5))

    if restarts:
        write = only_write(plan)
        assert write.task is not None
        assert write.task.attempt == 2
        assert write.task.restarts == 1
    else:
        assert is_idle(plan)
        assert plan.wake_at is None


def test_gives_up_after_max_restarts() -> None:
    status = make_status(0, "m1", 4, TaskState.FAILED, exit_code=1)
    task = make_task(0, "m1", attempt=4, restarts=3)
    view = make_view(make_job(1, max_restarts=3), task, statuses=(status,))

    write = only_write(plan_job(view, NOW + timedelta(hours=1)))
    assert write.task is not None
    assert write.task.message == "gave up after 3 restarts"
    assert write.task.attempt == 4
    assert write.task.restarts == 3
    assert write.assignment is None

    said = make_task(0, "m1", attempt=4, restarts=3, message="gave up after 3 restarts")
    assert is_idle(plan_job(make_view(make_job(1, max_restarts=3), said, statuses=(status,)), NOW))


def test_batch_jobs_do_not_restart_exited_tasks() -> None:
    exited = make_status(0, "m1", 1, TaskState.EXITED, exit_code=0)
    failed = make_status(1, "m1", 1, TaskState.FAILED, exit_code=3)
    view = make_view(
        make_job(2, kind=JobKind.BATCH),
        make_task(0, "m1", attempt=1),
        make_task(1, "m1", attempt=1),
        statuses=(exited, failed),
    )

    plan = plan_job(view, NOW + timedelta(minutes=1))
    [restarted] = plan.writes
    assert restarted.index == 1
    # The one done gives its machine back, and stays done.
    [done] = plan.release
    assert (done.index, done.unassign) == (0, "m1")
    assert done.task is not None
    assert (done.task.state, done.task.machine) == (TaskState.EXITED, None)
    assert done.task.message == "exited with exit code 0"
    after = make_view(make_job(1, kind=JobKind.BATCH), Stored(done.task, 200))
    assert is_idle(plan_job(after, NOW + timedelta(minutes=2)))


def admitted(count: int, by: str | None = None) -> Admission:
    return Admission(
        job=HANDLE,
        state=AdmissionState.ADMITTED if by is None else AdmissionState.PREEMPTING,
        priority=100,
        queued_at=NOW,
        task_resources=Resources(cpu=100),
        tasks=3,
        least_tasks=3,
        admitted=count,
        preempted_by=by,
        updated_at=NOW,
    )


def test_only_admitted_tasks_are_created() -> None:
    queued = replace(make_view(make_job(3)), admission=admitted(0))
    assert is_idle(plan_job(queued, NOW))
    plan = plan_job(replace(queued, admission=admitted(2)), NOW)
    assert [write.index for write in plan.create] == [0, 1]


def test_a_job_with_an_admission_record_not_yet_seen_creates_no_task() -> None:
    job = make_job(3)
    unseen = make_view(replace(job, value=job.value.model_copy(update={"has_admission": True})))
    assert is_idle(plan_job(unseen, NOW))
    # A job older than admission records has none and runs whole.
    assert [write.index for write in plan_job(make_view(job), NOW).create] == [0, 1, 2]


def test_preempted_tasks_get_notice_then_stop_and_go() -> None:
    running = [make_status(i, "m1", 1, TaskState.RUNNING) for i in range(3)]
    tasks = [make_task(i, "m1", attempt=1) for i in range(3)]
    view = replace(
        make_view(make_job(3), *tasks, statuses=tuple(running)),
        admission=admitted(1, by="ads/urgent"),
        preempt_grace_s=30,
    )
    plan = plan_job(view, NOW)
    assert not plan.writes
    assert not plan.release
    notices = [write.operation for write in plan.operations]
    assert [(op.kind, op.tasks, op.deadline) for op in notices] == [
        (OperationKind.PREEMPT, [1], NOW + timedelta(seconds=30)),
        (OperationKind.PREEMPT, [2], NOW + timedelta(seconds=30)),
    ]
    assert notices[0].reason == "preempted for ads/urgent"
    # At the deadline, whatever the controller says, the tasks stop.
    stored_ops = {op.id: Stored(op, 300) for op in notices}
    later = plan_job(replace(view, operations=stored_ops), NOW + timedelta(seconds=30))
    stopped = sorted(write.index for write in later.writes)
    assert stopped == [1, 2]
    assert all(write.task and write.task.desired is DesiredState.STOPPED for write in later.writes)
    assert all(
        write.operation and write.operation.operation.state is OperationState.DONE
        for write in later.writes
    )
    # Once stopped they are released and deleted; task 0 runs on.
    killed = [running[0], *(make_status(i, "m1", 1, TaskState.KILLED) for i in (1, 2))]
    gone = plan_job(
        replace(view, statuses={s.index: s for s in killed}), NOW + timedelta(seconds=31)
    )
    assert sorted((write.index, write.task) for write in gone.release) == [(1, None), (2, None)]
    # Their statuses stay, with the steps they reported: where their next attempts resume.
    assert all(write.keep_status for write in gone.release)


def test_a_preempted_task_resumes_from_the_steps_it_reported() -> None:
    # Task 1 was preempted at 500 steps: its task record is gone, its status kept.
    kept = make_status(1, "m1", 4, TaskState.KILLED, progress=500)
    view = make_view(make_job(2), make_task(0, "m1", attempt=1), statuses=(kept,))
    pending = Stored(
        Task(job=HANDLE, index=1, generation=1, version="1.0", attempt=9, updated_at=NOW), 40
    )
    view = replace(view, tasks={**view.tasks, 1: pending})
    (write,) = placement_writes(view, {1: "m2"}, NOW)
    assert write.assignment is not None
    machine, assignment = write.assignment
    assert (machine, assignment.attempt, assignment.progress) == ("m2", 10, 500)
    # A task scaled away, or one of a job being deleted, takes its status with it.
    shrunk = make_view(make_job(1), make_task(1))
    released = plan_job(shrunk, NOW).release
    assert [(write.index, write.keep_status) for write in released] == [(1, False)]
    # Scaled down while suspended: the status kept for the index it no longer has goes.
    suspended = replace(make_view(make_job(1)), statuses={1: kept})
    (write,) = [write for write in plan_job(suspended, NOW).writes if write.index == 1]
    assert (write.revision, write.task, write.keep_status) == (0, None, False)


def test_only_tasks_preempted_for_another_entitlement_hand_their_machines_back() -> None:
    view = make_view(make_job(3))
    assert not preempted_for_another(view)  # older than admission records
    assert not preempted_for_another(replace(view, admission=admitted(3)))
    assert not preempted_for_another(replace(view, admission=admitted(1, by="ads/urgent")))
    assert preempted_for_another(replace(view, admission=admitted(1, by="research/lender")))


def test_grace_zero_stops_at_once() -> None:
    running = [make_status(i, "m1", 1, TaskState.RUNNING) for i in range(2)]
    view = replace(
        make_view(
            make_job(2), *(make_task(i, "m1", attempt=1) for i in range(2)), statuses=tuple(running)
        ),
        admission=admitted(0, by="ads/urgent"),
        preempt_grace_s=0,
    )
    plan = plan_job(view, NOW)
    assert sorted(write.index for write in plan.writes) == [0, 1]
    assert all(
        write.operation and write.operation.operation.kind is OperationKind.PREEMPT
        for write in plan.writes
    )


def test_task_on_a_down_machine_is_lost_then_placed_again() -> None:
    machines = {"m1": make_machine("m1", MachineState.DOWN), "m2": make_machine("m2")}
    running = make_status(0, "m1", 2, TaskState.RUNNING)
    view = make_view(
        make_job(2),
        make_task(0, "m1", attempt=2),
        make_task(1, "m2", attempt=1),
        statuses=(running,),
        machines=machines,
    )

    plan = plan_job(view, NOW)
    assert not plan.writes
    assert not plan.place
    assert len(plan.release) == 1
    lost = plan.release[0]
    assert lost.index == 0
    assert lost.unassign == "m1"
    assert lost.assignment is None
    assert lost.task is not None
    assert lost.task.state is TaskState.LOST
    assert lost.task.machine is None
    assert lost.task.message == "machine m1 is down"
    assert lost.task.attempt == 2

    again = make_view(make_job(2), Stored(lost.task, 300), make_task(1, "m2", attempt=1))
    replan = plan_job(again, NOW)
    assert replan.place == [0]
    placed = placement_writes(again, {0: "m2"}, NOW)[0]
    assert placed.task is not None
    assert placed.task.attempt == 3
    assert placed.task.restarts == 0


def test_machine_missing_from_the_inventory_counts_as_down() -> None:
    view = make_view(make_job(1), make_task(0, "gone", attempt=1))
    plan = plan_job(view, NOW)
    assert [write.unassign for write in plan.release] == ["gone"]


def test_a_machine_the_leader_has_not_heard_of_yet_is_not_down() -> None:
    # The allocator placed the task (revision 100) on a machine registered after the revision
    # the leader's machine mirror is at: the task stays where it is.
    task = make_task(0, "new", attempt=1)
    assert task.revision == 100
    plan = plan_job(make_view(make_job(1), task, machines_revision=99), NOW)
    assert (plan.release, plan.place, plan.writes) == ([], [], [])


def test_scale_down_stops_extra_tasks_then_removes_them_once_killed() -> None:
    job = make_job(1, generation=2)
    extra = make_task(1, "m2", attempt=1)
    view = make_view(job, make_task(0, "m1", attempt=1), extra)

    write = only_write(plan_job(view, NOW))
    assert write.index == 1
    assert write.task is not None
    assert write.task.desired is DesiredState.STOPPED
    assert write.task.attempt == 1
    assert write.assignment is not None
    assert write.assignment[0] == "m2"
    assert write.assignment[1].desired is DesiredState.STOPPED
    assert write.assignment[1].attempt == 1

    stopping = make_task(1, "m2", attempt=1, desired=DesiredState.STOPPED)
    running = make_status(1, "m2", 1, TaskState.RUNNING)
    waiting = make_view(job, make_task(0, "m1", attempt=1), stopping, statuses=(running,))
    assert is_idle(plan_job(waiting, NOW))

    killed = make_status(1, "m2", 1, TaskState.KILLED)
    plan = plan_job(
        make_view(job, make_task(0, "m1", attempt=1), stopping, statuses=(killed,)), NOW
    )
    assert not plan.writes
    assert [(w.index, w.task, w.unassign) for w in plan.release] == [(1, None, "m2")]


def test_scale_down_removes_a_task_without_machine_at_once() -> None:
    plan = plan_job(make_view(make_job(1), make_task(0, "m1", attempt=1), make_task(1)), NOW)
    assert [(w.index, w.task, w.unassign) for w in plan.release] == [(1, None, None)]
    assert not plan.place


def test_deleting_job_stops_every_task_and_is_deleted_after_the_last() -> None:
    job = make_job(2, deleting=True)
    plan = plan_job(make_view(job, make_task(0, "m1", attempt=1)), NOW)
    assert [w.index for w in plan.writes] == [0]  # no task 1 is created
    assert plan.writes[0].task is not None
    assert plan.writes[0].task.desired is DesiredState.STOPPED
    assert not plan.delete_job

    exited = make_status(0, "m1", 1, TaskState.EXITED, exit_code=0)
    stopping = make_task(0, "m1", attempt=1, desired=DesiredState.STOPPED)
    plan = plan_job(make_view(job, stopping, statuses=(exited,)), NOW)
    assert [w.index for w in plan.release] == [0]
    assert not plan.delete_job

    plan = plan_job(make_view(job), NOW)
    assert plan.delete_job
    assert plan.writes == plan.release == []
    assert plan.place == []


def test_deleting_job_removes_tasks_on_down_machines_without_waiting() -> None:
    job = make_job(1, deleting=True)
    machines = {"m1": make_machine("m1", MachineState.DOWN)}
    plan = plan_job(make_view(job, make_task(0, "m1", attempt=1), machines=machines), NOW)
    assert [(w.index, w.task, w.unassign) for w in plan.release] == [(0, None, "m1")]


def test_status_of_an_older_attempt_or_another_machine_is_ignored() -> None:
    task = make_task(0, "m1", attempt=2)
    older = make_status(0, "m1", 1, TaskState.FAILED, exit_code=1)
    elsewhere = make_status(0, "m2", 2, TaskState.FAILED, exit_code=1)
    for status in (older, elsewhere):
        plan = plan_job(make_view(make_job(1), task, statuses=(status,)), NOW + timedelta(hours=1))
        assert is_idle(plan)
        assert plan.wake_at is None


def test_scaled_back_up_task_runs_again_as_a_new_attempt() -> None:
    stopping = make_task(0, "m1", attempt=2, restarts=1, desired=DesiredState.STOPPED)
    write = only_write(plan_job(make_view(make_job(1), stopping), NOW))
    assert write.task is not None
    assert write.task.desired is DesiredState.RUNNING
    assert write.task.attempt == 3
    assert write.task.restarts == 1
    assert write.assignment is not None
    assert write.assignment[1].desired is DesiredState.RUNNING
