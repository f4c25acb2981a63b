"""The small behaviours models carry: handles, ids, fault domains, state transitions."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from tether.model import (
    ALLOWED_TRANSITIONS,
    TERMINAL_STATES,
    AdvanceNotice,
    FaultDomain,
    Job,
    JobSpec,
    MaintenanceKind,
    Resources,
    Task,
    TaskState,
    TaskTemplate,
    Topology,
    can_transition,
    drain_id,
    parse_job_handle,
)

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def test_parse_job_handle_splits_entitlement_and_name() -> None:
    assert parse_job_handle("ads-ranking/feed-ranker") == ("ads-ranking", "feed-ranker")


@pytest.mark.parametrize("handle", ["web", "a/b/c", "/web", "team/", "Team/web", "a/b\n", ""])
def test_parse_job_handle_explains_what_is_wrong(handle: str) -> None:
    with pytest.raises(ValueError, match="invalid job handle") as raised:
        parse_job_handle(handle)
    assert repr(handle) in str(raised.value)
    assert "'<entitlement>/<job>'" in str(raised.value)


def test_job_and_task_identifiers() -> None:
    spec = JobSpec(
        name="web",
        entitlement="team-a",
        count=2,
        task=TaskTemplate(package="web", version="1", command="serve", resources=Resources()),
    )
    job = Job(spec=spec, generation=1, created_at=T0, updated_at=T0)
    assert job.handle == spec.handle == "team-a/web"
    task = Task(job=job.handle, index=7, generation=1, version="1", updated_at=T0)
    assert task.task_id == "team-a/web/7"


def test_fault_domain_of_is_a_path_unique_in_the_region() -> None:
    topology = Topology(region="r1", dc="dc1", msb="msb2", rack="r07")
    assert FaultDomain.DC.of(topology) == "dc1"
    assert FaultDomain.MSB.of(topology) == "dc1/msb2"
    assert FaultDomain.RACK.of(topology) == "dc1/msb2/r07"
    same_rack_name = Topology(region="r1", dc="dc1", msb="msb3", rack="r07")
    assert FaultDomain.RACK.of(same_rack_name) != FaultDomain.RACK.of(topology)


def test_advance_notice_end() -> None:
    notice = AdvanceNotice(
        id="n-1", machines=["m-1"], start=T0, duration_s=5400, kind=MaintenanceKind.POWER
    )
    assert notice.end == datetime(2030, 1, 1, 1, 30, tzinfo=UTC)


def test_drain_ids_are_one_per_machine_and_kind_and_always_valid_identifiers() -> None:
    assert drain_id(MaintenanceKind.DRAIN, "m-1") == "drain-m-1"
    assert drain_id(MaintenanceKind.DECOMMISSION, "m-1") == "decommission-m-1"
    longest = "m" * 63
    cut = drain_id(MaintenanceKind.DECOMMISSION, longest)
    assert cut == drain_id(MaintenanceKind.DECOMMISSION, longest), "deterministic"
    assert cut != drain_id(MaintenanceKind.DECOMMISSION, "m" * 62 + "n")
    assert cut.startswith("decommission-mmm")
    for notice_id in (cut, drain_id(MaintenanceKind.DRAIN, longest)):
        notice = AdvanceNotice(
            id=notice_id, machines=[longest], start=T0, duration_s=60, kind=MaintenanceKind.DRAIN
        )
        assert len(notice.id) == 64
    with pytest.raises(ValueError, match="planned maintenance"):
        drain_id(MaintenanceKind.REBOOT, "m-1")


def test_transition_table_covers_every_state_and_stays_inside_it() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(TaskState)
    for targets in ALLOWED_TRANSITIONS.values():
        assert targets <= set(TaskState)
    assert not any(can_transition(state, state) for state in TaskState)


def test_the_happy_path_is_allowed() -> None:
    path = [
        TaskState.PENDING,
        TaskState.PLACED,
        TaskState.STARTING,
        TaskState.RUNNING,
        TaskState.EXITED,
    ]
    assert all(can_transition(a, b) for a, b in itertools.pairwise(path))


@pytest.mark.parametrize(
    ("current", "new"),
    [
        (TaskState.PENDING, TaskState.RUNNING),
        (TaskState.PENDING, TaskState.STARTING),
        (TaskState.RUNNING, TaskState.PENDING),
        (TaskState.RUNNING, TaskState.PLACED),
        (TaskState.KILLED, TaskState.RUNNING),
        (TaskState.LOST, TaskState.STARTING),
        (TaskState.EXITED, TaskState.RUNNING),
    ],
)
def test_skipping_or_reversing_steps_is_not_allowed(current: TaskState, new: TaskState) -> None:
    assert not can_transition(current, new)


def test_every_running_state_can_end_and_every_end_can_restart() -> None:
    assert {
        TaskState.EXITED,
        TaskState.FAILED,
        TaskState.LOST,
        TaskState.KILLED,
    } == TERMINAL_STATES
    for state in (TaskState.PLACED, TaskState.STARTING, TaskState.RUNNING):
        assert {TaskState.KILLED, TaskState.LOST, TaskState.FAILED} <= ALLOWED_TRANSITIONS[state]
    for state in TERMINAL_STATES:
        assert can_transition(state, TaskState.PENDING)
        assert not ALLOWED_TRANSITIONS[state] & TERMINAL_STATES


def test_enums_serialise_as_their_lowercase_values() -> None:
    assert [state.value for state in TaskState] == [s.name.lower() for s in TaskState]
    assert f"{TaskState.RUNNING}" == "running"
