"""The broker's pure harvest decisions: which tasks a shrink moves (the lowest priority first,
none that could stay), the notices a report calls for, and the states they put machines in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.machines import make_machine
from tether.broker.harvest import capacity_change, displaced, harvest_notices
from tether.broker.maintenance import maintenance_state
from tether.model import (
    AdvanceNotice,
    Machine,
    MachineState,
    MaintenanceKind,
    Resources,
    drain_id,
)
from tether.model.machine import Harvest
from tether.model.resources import ZERO

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SHRINK_ID = drain_id(MaintenanceKind.HARVEST_SHRINK, "m1")
EVICTION_ID = drain_id(MaintenanceKind.EVICTION, "m1")


def cpu(millicores: int) -> Resources:
    return Resources(cpu=millicores)


def test_the_lowest_priority_moves_first_and_nothing_when_all_fit() -> None:
    held = {"a/low/0": cpu(1000), "a/high/0": cpu(1000), "b/mid/0": cpu(1000)}
    priorities = {"a/low": 10, "a/high": 300, "b/mid": 100}
    assert displaced(held, priorities, cpu(3000)) == []
    assert displaced(held, priorities, cpu(2000)) == ["a/low/0"]
    assert displaced(held, priorities, cpu(1000)) == ["a/low/0", "b/mid/0"]
    assert displaced(held, priorities, ZERO) == sorted(held)


def test_a_task_taken_early_goes_back_when_a_bigger_one_made_room() -> None:
    # The small low-priority task goes first, then the big one; without the small one the rest
    # already fits, so it stays.
    held = {"a/small/0": cpu(500), "a/big/0": cpu(3000), "a/keep/0": cpu(1000)}
    priorities = {"a/small": 1, "a/big": 2, "a/keep": 3}
    assert displaced(held, priorities, cpu(1500)) == ["a/big/0"]


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4000), min_size=1, max_size=8),
    priorities=st.lists(st.integers(0, 3), min_size=8, max_size=8),
    usable=st.integers(0, 16000),
)
def test_what_stays_fits_and_every_task_moved_was_needed(
    sizes: list[int], priorities: list[int], usable: int
) -> None:
    held = {f"e/j{n}/0": cpu(size) for n, size in enumerate(sizes)}
    by_job = {f"e/j{n}": priorities[n] for n in range(len(sizes))}
    moved = displaced(held, by_job, cpu(usable))
    staying = sum((held[t] for t in held if t not in moved), ZERO)
    assert staying.fits_in(cpu(usable))
    for task in moved:
        assert not (staying + held[task]).fits_in(cpu(usable)), f"{task} could have stayed"


def test_a_shrink_notice_names_the_tasks_and_is_kept_while_they_are_the_same() -> None:
    machine = make_machine("m1", harvest=Harvest(usable=cpu(1000)))
    held = {"a/low/0": cpu(1000), "a/high/0": cpu(1000)}
    priorities = {"a/low": 1, "a/high": 2}
    wanted = harvest_notices(machine, held, priorities, {}, NOW, 30)
    shrink = wanted[SHRINK_ID]
    assert shrink is not None
    assert (shrink.kind, shrink.tasks, shrink.machines) == (
        MaintenanceKind.HARVEST_SHRINK,
        ["a/low/0"],
        ["m1"],
    )
    assert shrink.start == NOW + timedelta(seconds=30)
    assert wanted[EVICTION_ID] is None
    # A later report that moves the same tasks keeps the notice and its deadline.
    later = harvest_notices(machine, held, priorities, {SHRINK_ID: shrink}, NOW + timedelta(9), 30)
    assert later[SHRINK_ID] == shrink
    # Grown back: the notice goes.
    grown = make_machine("m1", harvest=Harvest(usable=cpu(4000)))
    assert harvest_notices(grown, held, priorities, {SHRINK_ID: shrink}, NOW, 30)[SHRINK_ID] is None


def test_an_eviction_notice_lasts_while_the_report_carries_it() -> None:
    evict_by = NOW + timedelta(seconds=30)
    machine = make_machine("m1", harvest=Harvest(usable=cpu(4000), evict_by=evict_by))
    eviction = harvest_notices(machine, {}, {}, {}, NOW, 30)[EVICTION_ID]
    assert eviction is not None
    assert (eviction.kind, eviction.start, eviction.tasks) == (
        MaintenanceKind.EVICTION,
        evict_by,
        [],
    )
    assert harvest_notices(make_machine("m1"), {}, {}, {}, NOW, 30) == {
        SHRINK_ID: None,
        EVICTION_ID: None,
    }


def test_an_eviction_drains_the_machine_and_a_shrink_leaves_it_up() -> None:
    def notice(kind: MaintenanceKind) -> AdvanceNotice:
        return AdvanceNotice(
            id="n1", machines=["m1"], start=NOW + timedelta(seconds=30), duration_s=60, kind=kind
        )

    eviction, shrink = notice(MaintenanceKind.EVICTION), notice(MaintenanceKind.HARVEST_SHRINK)
    up, draining = MachineState.UP, MachineState.DRAINING
    assert maintenance_state(up, [eviction], NOW) is draining
    # Past its start it still drains, until the window ends (the host has it by then).
    assert maintenance_state(draining, [eviction], NOW + timedelta(seconds=60)) is None
    assert maintenance_state(up, [shrink], NOW) is None
    assert maintenance_state(up, [shrink], NOW + timedelta(seconds=60)) is None
    assert shrink.names("a/b/0")
    assert not AdvanceNotice.model_validate({**shrink.model_dump(), "tasks": ["a/b/1"]}).names(
        "a/b/0"
    )


def test_a_report_counts_as_a_shrink_or_a_growth_of_the_usable_share() -> None:
    def share(millicores: int, memory: int = 8192) -> Machine:
        usable = Resources(cpu=millicores, memory_mib=memory)
        return make_machine("m1", harvest=Harvest(usable=usable))

    assert capacity_change(share(2000), share(1000)) == "shrink"
    assert capacity_change(share(1000), share(2000)) == "grow"
    # Less of one dimension is a shrink, whatever the others did.
    assert capacity_change(share(1000, 8192), share(2000, 4096)) == "shrink"
    assert capacity_change(share(1000), share(1000)) is None
    assert capacity_change(None, share(1000)) is None
    assert capacity_change(make_machine("m1"), share(1000)) == "shrink"
    assert capacity_change(share(1000), make_machine("m1")) is None
