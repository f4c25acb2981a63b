"""Each strategy's measure, and the groups it proposes, on small regions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.support.allocator_builders import machine
from tests.unit.rebalancer.regions import On, region
from tether.model import (
    MachineState,
    OperationKind,
    Placement,
    Resources,
    Spread,
    TaskOperation,
)
from tether.model.machine import Harvest
from tether.model.rebalance import STRATEGY_NAMES
from tether.rebalancer.strategies.hot_msbs import HotMsbs
from tether.rebalancer.strategies.idle_machines import IdleMachines
from tether.rebalancer.strategies.left_behind import LeftBehind
from tether.rebalancer.strategies.registry import STRATEGIES
from tether.rebalancer.strategies.spread import SpreadViolations
from tether.rebalancer.strategies.stranded import StrandedCapacity
from tether.rebalancer.view import Move

SPREAD = {"web": Placement(spread=Spread(max_skew=1))}


def test_spread_counts_tasks_beyond_the_skew_and_proposes_one_of_the_fullest_domain() -> None:
    # Three tasks in msb0's two machines, three other MSBs empty: 3 - 0 - 1 = 2 over.
    machines = [machine("a", msb="msb0"), machine("b", msb="msb0")]
    machines += [machine(f"m{n}", msb=f"msb{n}") for n in (1, 2, 3)]
    view = region(
        machines,
        [On("ads/web", 0, "a"), On("ads/web", 1, "a"), On("ads/web", 2, "b")],
        placements=SPREAD,
    )
    spread = SpreadViolations(view)
    assert spread.measure(view) == 2
    candidates = spread.candidates(view)
    assert [c.tasks[0].id for c in candidates] == ["ads/web/0", "ads/web/1"], (
        "as many as the domain is over, from its busiest machine first"
    )
    assert "3 tasks in msb dc1/msb0" in candidates[0].why
    view.apply([Move(candidates[0].tasks[0], "m1")])
    assert spread.measure(view) == 1


def test_spread_counts_every_domain_over_so_one_move_out_of_a_tie_gains() -> None:
    # Two tasks in msb0 and two in msb1, two MSBs empty: each full one is one over (cap 0 + 1).
    view = region(
        4,
        [
            On("ads/web", 0, "m0"),
            On("ads/web", 1, "m0"),
            On("ads/web", 2, "m1"),
            On("ads/web", 3, "m1"),
        ],
        placements=SPREAD,
    )
    spread = SpreadViolations(view)
    assert spread.measure(view) == 2
    assert {c.tasks[0].machine for c in spread.candidates(view)} == {"m0", "m1"}
    view.apply([Move(view.tasks["ads/web/0"], "m2")])
    assert spread.measure(view) == 1


def test_spread_within_the_skew_proposes_nothing() -> None:
    view = region(4, [On("ads/web", i, f"m{i}") for i in range(3)], placements=SPREAD)
    spread = SpreadViolations(view)
    assert (spread.measure(view), spread.candidates(view)) == (0, [])


def test_stranded_capacity_is_free_room_on_busy_machines_and_empties_the_least_used() -> None:
    view = region(
        3,
        [
            On("ads/a", 0, "m0", cpu=400, memory=400),  # 10% used
            On("ads/b", 0, "m1", cpu=2400, memory=2400),  # 60% used
        ],
    )
    stranded = StrandedCapacity(view)
    assert stranded.measure(view) == pytest.approx(0.9 + 0.4)
    candidates = stranded.candidates(view)
    assert [c.tasks[0].machine for c in candidates] == ["m0"], "m1 is used beyond the bar"
    view.apply([Move(candidates[0].tasks[0], "m1")])
    assert stranded.measure(view) == pytest.approx(0.3), "m0 is empty: whole again"


def test_idle_machines_are_an_entitlements_barely_used_ones() -> None:
    view = region(
        3,
        [On("ads/a", 0, "m0", cpu=400, memory=400), On("ads/b", 0, "m1", cpu=2400, memory=2400)],
        owners={"m0": "ads", "m1": "ads"},
    )
    idle = IdleMachines(view)
    assert idle.measure(view) == 1
    [candidate] = idle.candidates(view)
    assert candidate.why == "m0 of ads is 10% used"
    view.apply([Move(candidate.tasks[0], "m1")])
    assert idle.measure(view) == 0


def test_a_machine_is_emptied_only_if_every_job_on_it_may_move() -> None:
    tasks = [On("ads/a", 0, "m0", cpu=400, memory=400), On("ads/b", 0, "m0", cpu=400, memory=400)]
    now = datetime.now(UTC)
    restart = TaskOperation(
        id="restart-1",
        kind=OperationKind.RESTART,
        job="ads/b",
        tasks=[0],
        reason="x",
        created_at=now,
        updated_at=now,
    )
    busy = region(3, tasks, operations={"ads/b": [restart]})
    assert IdleMachines(busy).candidates(busy) == []
    unhealthy = region(3, [tasks[0], On("ads/b", 0, "m0", cpu=400, memory=400, healthy=False)])
    assert StrandedCapacity(unhealthy).candidates(unhealthy) == []
    calm = region(3, tasks)
    [candidate] = StrandedCapacity(calm).candidates(calm)
    assert {t.job for t in candidate.tasks} == {"ads/a", "ads/b"}


def test_hot_msbs_run_busier_than_the_region_and_give_up_their_busiest_machines_tasks() -> None:
    tasks = [On("ads/hot", i, "m0", cpu=1000, memory=1000) for i in range(3)]  # m0: 75%
    tasks += [On("ads/cool", 0, "m1", cpu=400, memory=400)]  # m1: 10%
    view = region(4, tasks)
    hot = HotMsbs(view)
    # Mean heat (0.75 + 0.1 + 0 + 0) / 4 = 0.2125; the bar 0.3625; msb0 is 0.3875 over it.
    assert hot.measure(view) == pytest.approx(0.75 - 0.3625)
    candidates = hot.candidates(view)
    assert {c.tasks[0].machine for c in candidates} == {"m0"}
    view.apply([Move(candidates[0].tasks[0], "m2")])
    assert hot.measure(view) == pytest.approx(0.5 - 0.3625)


def test_tasks_left_on_draining_or_shrunken_machines_are_proposed_one_by_one() -> None:
    shrunk = machine(
        "m1",
        msb="msb1",
        harvest=Harvest(usable=Resources(cpu=1000, memory_mib=1024)),
    )
    machines = [machine("m0", state=MachineState.DRAINING), shrunk, machine("m2", msb="msb2")]
    view = region(
        machines,
        [On("ads/a", 0, "m0"), On("ads/b", 0, "m1"), On("ads/b", 1, "m1"), On("ads/c", 0, "m2")],
    )
    left = LeftBehind(view)
    assert left.measure(view) == 3
    whys = [c.why for c in left.candidates(view)]
    assert whys == ["m0 is draining"] + ["m1 holds more than it can use now"] * 2
    # One task off the shrunken machine and the other fits: neither is left behind.
    view.apply([Move(view.tasks["ads/b/1"], "m2")])
    assert left.measure(view) == 1


def test_the_registry_names_each_strategy_once_under_its_own_name() -> None:
    view = region(1, [])
    assert list(STRATEGIES) == ["left-behind", "spread", "idle", "stranded", "hot-msbs"]
    assert tuple(STRATEGIES) == STRATEGY_NAMES, "what runs and settings may name"
    for name, make in STRATEGIES.items():
        strategy = make(view)
        assert strategy.name == name
        assert strategy.measure(view) == 0
        assert strategy.candidates(view) == []
