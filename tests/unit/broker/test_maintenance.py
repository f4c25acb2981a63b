"""The broker's pure maintenance decisions: planned windows, drains and decommissions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tether.broker.maintenance import awaits_empty, is_over, maintenance_state, next_change
from tether.model import MAX_MAINTENANCE_S, AdvanceNotice, MachineState, MaintenanceKind

NOW = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
UP, DRAINING, MAINTENANCE, DOWN, DECOMMISSIONED = (
    MachineState.UP,
    MachineState.DRAINING,
    MachineState.MAINTENANCE,
    MachineState.DOWN,
    MachineState.DECOMMISSIONED,
)


def notice(
    kind: MaintenanceKind,
    start_in_s: float,
    duration_s: int = 3600,
    notice_id: str = "n1",
) -> AdvanceNotice:
    return AdvanceNotice(
        id=notice_id,
        machines=["m1"],
        start=NOW + timedelta(seconds=start_in_s),
        duration_s=duration_s,
        kind=kind,
    )


def drain(start_in_s: float) -> AdvanceNotice:
    return notice(MaintenanceKind.DRAIN, start_in_s, MAX_MAINTENANCE_S, "drain-m1")


def decommission(start_in_s: float) -> AdvanceNotice:
    return notice(MaintenanceKind.DECOMMISSION, start_in_s, MAX_MAINTENANCE_S, "decommission-m1")


@pytest.mark.parametrize(
    ("current", "start_in_s", "wanted"),
    [
        (UP, 60, DRAINING),  # scheduled: drains until the start
        (UP, -60, MAINTENANCE),  # in the window
        (DRAINING, -60, MAINTENANCE),
        (MAINTENANCE, -60, None),  # already so
        (MAINTENANCE, -3600, UP),  # the window is over
        (DRAINING, -7200, UP),
        (UP, -3600, None),  # over, and never held
        (DOWN, 60, None),  # the health checker's
        (DOWN, -60, None),
    ],
)
def test_planned_maintenance_drains_holds_and_returns(
    current: MachineState, start_in_s: float, wanted: MachineState | None
) -> None:
    assert maintenance_state(current, [notice(MaintenanceKind.REBOOT, start_in_s)], NOW) is wanted


def test_without_notices_only_maintained_machines_go_back_up() -> None:
    for held in (DRAINING, MAINTENANCE, DECOMMISSIONED):
        assert maintenance_state(held, [], NOW) is UP
    for other in (UP, DOWN):
        assert maintenance_state(other, [], NOW) is None


@pytest.mark.parametrize("start_in_s", [300, 0, -60, -86400])
def test_a_drain_keeps_the_machine_draining_through_its_whole_window(start_in_s: float) -> None:
    assert maintenance_state(UP, [drain(start_in_s)], NOW) is DRAINING
    assert maintenance_state(DRAINING, [drain(start_in_s)], NOW) is None
    # Even with nothing left on it: a drain never decommissions.
    assert maintenance_state(DRAINING, [drain(start_in_s)], NOW, empty=True) is None


def test_a_drain_ends_with_its_window() -> None:
    over = drain(-MAX_MAINTENANCE_S)
    assert maintenance_state(DRAINING, [over], NOW) is UP
    assert is_over(over, NOW)
    assert not is_over(drain(-60), NOW)


def test_a_decommission_drains_until_its_start_and_until_the_machine_is_empty() -> None:
    ahead, due = decommission(300), decommission(0)
    assert maintenance_state(UP, [ahead], NOW) is DRAINING
    assert maintenance_state(DRAINING, [ahead], NOW, empty=True) is None, "not due yet"
    assert maintenance_state(DRAINING, [due], NOW, empty=False) is None
    assert maintenance_state(UP, [due], NOW, empty=False) is DRAINING
    assert maintenance_state(DRAINING, [due], NOW, empty=True) is DECOMMISSIONED
    assert maintenance_state(UP, [due], NOW, empty=True) is DECOMMISSIONED


def test_a_decommissioned_machine_stays_so_past_the_window() -> None:
    long_ago = decommission(-2 * MAX_MAINTENANCE_S)
    assert maintenance_state(DECOMMISSIONED, [long_ago], NOW) is None
    assert not is_over(long_ago, NOW)
    assert maintenance_state(DECOMMISSIONED, [decommission(-1)], NOW, empty=False) is None


def test_a_down_machine_is_left_alone_unless_an_empty_one_is_due_for_decommissioning() -> None:
    assert maintenance_state(DOWN, [decommission(300)], NOW, empty=True) is None
    assert maintenance_state(DOWN, [decommission(-1)], NOW, empty=False) is None
    assert maintenance_state(DOWN, [decommission(-1)], NOW, empty=True) is DECOMMISSIONED
    assert maintenance_state(DOWN, [drain(-1)], NOW, empty=True) is None


def test_the_notice_that_holds_the_machine_most_wins() -> None:
    window = notice(MaintenanceKind.POWER, -60, notice_id="power")
    assert maintenance_state(UP, [drain(300), window], NOW) is MAINTENANCE
    assert maintenance_state(UP, [window, decommission(-1)], NOW, empty=False) is MAINTENANCE
    assert maintenance_state(MAINTENANCE, [window, decommission(-1)], NOW, empty=True) is (
        DECOMMISSIONED
    )
    # Maintenance over, the drain goes on.
    over = notice(MaintenanceKind.POWER, -7200, notice_id="power")
    assert maintenance_state(MAINTENANCE, [over, drain(-7200)], NOW) is DRAINING


def test_emptiness_matters_only_once_a_decommission_is_due() -> None:
    assert awaits_empty(DRAINING, [decommission(0)], NOW)
    assert awaits_empty(DOWN, [decommission(-60)], NOW)
    assert not awaits_empty(DRAINING, [decommission(60)], NOW)
    assert not awaits_empty(DECOMMISSIONED, [decommission(-60)], NOW)
    assert not awaits_empty(DRAINING, [drain(-60)], NOW)


def test_next_change_skips_past_moments_and_a_decommissions_end() -> None:
    planned = notice(MaintenanceKind.REBOOT, 60, duration_s=600)
    assert next_change([planned], NOW) == planned.start
    assert next_change([planned], planned.start) == planned.end
    assert next_change([planned], planned.end) is None
    assert next_change([decommission(60)], NOW) == NOW + timedelta(seconds=60)
    assert next_change([decommission(-60)], NOW) is None
    assert next_change([drain(-60)], NOW) == drain(-60).end
