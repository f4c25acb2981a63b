"""The health checker's decisions: grace periods, down and back up, what it never touches."""

from __future__ import annotations

import pytest

from tether.health.checker import Absences, next_state
from tether.model import MachineState

GRACE_S = 5.0


def test_an_up_machine_is_left_alone_while_its_heartbeat_is_missing_less_than_the_grace() -> None:
    assert next_state(MachineState.UP, False, GRACE_S - 0.1, GRACE_S) is None


def test_an_up_machine_goes_down_once_its_heartbeat_is_missing_for_the_grace() -> None:
    assert next_state(MachineState.UP, False, GRACE_S, GRACE_S) is MachineState.DOWN
    assert next_state(MachineState.UP, False, GRACE_S * 10, GRACE_S) is MachineState.DOWN


def test_an_up_machine_with_a_heartbeat_stays_up_even_after_a_long_absence() -> None:
    # The heartbeat came back before the checker got to it.
    assert next_state(MachineState.UP, True, GRACE_S * 10, GRACE_S) is None


def test_a_down_machine_comes_back_up_with_its_heartbeat() -> None:
    assert next_state(MachineState.DOWN, True, 0.0, GRACE_S) is MachineState.UP
    assert next_state(MachineState.DOWN, False, GRACE_S * 10, GRACE_S) is None


@pytest.mark.parametrize(
    "state", [MachineState.DRAINING, MachineState.MAINTENANCE, MachineState.DECOMMISSIONED]
)
@pytest.mark.parametrize("heartbeat", [True, False])
def test_drains_and_maintenance_are_never_changed(state: MachineState, heartbeat: bool) -> None:
    assert next_state(state, heartbeat, GRACE_S * 10, GRACE_S) is None


def test_machines_without_heartbeat_at_start_count_from_the_start() -> None:
    absences = Absences(started_at=100.0)
    absences.machines_present(["m1", "m2"], heartbeats={"m2"})
    assert absences.missing() == ["m1"]
    assert absences.missing_for("m1", 103.0) == 3.0
    assert absences.missing_for("m2", 103.0) is None


def test_a_heartbeat_that_disappears_counts_from_when_it_did() -> None:
    absences = Absences(started_at=100.0)
    absences.heartbeat_gone("m1", 150.0)
    assert absences.missing_for("m1", 152.0) == 2.0
    # Gone again after coming back: counts afresh.
    absences.heartbeat_gone("m1", 160.0)
    assert absences.missing_for("m1", 161.0) == 1.0
    absences.forget("m1")
    assert absences.missing_for("m1", 170.0) is None
    assert absences.missing() == []


def test_seeing_a_machine_record_again_does_not_restart_its_absence() -> None:
    absences = Absences(started_at=100.0)
    absences.machines_present(["m1"], heartbeats=set())
    absences.machine_seen("m1", 120.0)
    assert absences.missing_for("m1", 121.0) == 21.0
    absences.machine_seen("m2", 120.0)
    assert absences.missing_for("m2", 121.0) == 1.0
