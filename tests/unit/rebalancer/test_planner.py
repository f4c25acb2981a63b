"""Choosing a round's moves: gains, the strategies a move must not hurt, and the limits."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.allocator_builders import machine
from tests.unit.rebalancer.regions import On, region
from tether.model import Placement, Spread
from tether.model.rebalance import STRATEGY_NAMES, RebalanceMove, RebalanceRun, StrategyName
from tether.rebalancer.planner import Limits, RoundPlan, plan_round
from tether.rebalancer.proposals import proposed_lately
from tether.rebalancer.strategies.registry import STRATEGIES
from tether.rebalancer.view import RegionView


def plan(
    view: RegionView,
    suggestions: Mapping[str, str],
    limits: Limits = Limits(per_job=1, per_minute=10),
    *,
    only: tuple[StrategyName, ...] = STRATEGY_NAMES,
    proposed_lately: int = 0,
) -> RoundPlan:
    strategies = [STRATEGIES[name](view) for name in only]
    candidates = [(s, c) for s in strategies for c in s.candidates(view)]
    # The same machines, whichever strategy asks.
    every = {name: suggestions for name in only}
    return plan_round(view, strategies, candidates, every, limits, proposed_lately=proposed_lately)


def consolidating() -> RegionView:
    """m0 and m1 lightly used by one task each, m2 half used, m3 empty, all in one MSB (where
    consolidating heats no MSB more than another): both light ones could empty."""
    return region(
        [machine(f"m{n}", msb="msb0") for n in range(4)],
        [
            On("ads/a", 0, "m0", cpu=400, memory=400),
            On("ads/b", 0, "m1", cpu=800, memory=800),
            On("ads/c", 0, "m2", cpu=2000, memory=2000),
        ],
    )


def test_a_round_moves_tasks_where_the_allocator_suggests_and_reports_the_gain() -> None:
    view = consolidating()
    result = plan(view, {"ads/a/0": "m2", "ads/b/0": "m2"})
    moved = [(m.job, m.source, m.target, m.strategy) for m in result.moves]
    assert moved == [("ads/a", "m0", "m2", "idle"), ("ads/b", "m1", "m2", "idle")]
    assert result.gains["idle"] == 2, "two machines all but idle emptied"
    # Free room on busy machines: 0.9 + 0.8 + 0.5 before, 0.2 (on m2) after.
    assert result.gains["stranded"] == pytest.approx(2.0)
    assert result.after["idle"] == 0
    assert view.tasks["ads/a/0"].machine == "m2", "the view holds the round's moves"


def test_no_move_where_the_allocator_would_put_the_task_nowhere_or_where_it_is() -> None:
    view = consolidating()
    result = plan(view, {"ads/a/0": "m0"})
    assert result.moves == []
    assert result.deferred["no-better-machine"] >= 2
    assert result.gains == dict.fromkeys(STRATEGIES, 0.0)


def test_a_move_that_gains_nothing_for_its_strategy_is_not_made() -> None:
    # Moving m0's task to the empty m3 leaves one machine all but idle, as before.
    result = plan(consolidating(), {"ads/a/0": "m3"}, only=("idle",))
    assert result.moves == []
    assert result.deferred == {"no-gain": 1, "no-better-machine": 1}


def test_a_move_that_would_not_fit_its_target_is_not_made() -> None:
    view = region(
        2,
        [On("ads/a", 0, "m0", cpu=400, memory=400), On("ads/b", 0, "m1", cpu=3800, memory=3800)],
    )
    result = plan(view, {"ads/a/0": "m1"}, only=("idle",))
    assert (result.moves, result.deferred) == ([], {"does-not-fit": 1})
    assert view.tasks["ads/a/0"].machine == "m0", "the view is as it was"


def test_a_move_that_would_break_another_strategy_is_not_made() -> None:
    # Emptying m0 would put both tasks of web in msb1: a spread violation for a machine saved.
    view = region(
        3,
        [On("ads/web", 0, "m0", cpu=400, memory=400), On("ads/web", 1, "m1", cpu=2000)],
        placements={"web": Placement(spread=Spread(max_skew=1))},
    )
    result = plan(view, {"ads/web/0": "m1"}, only=("spread", "idle"))
    assert result.moves == []
    assert result.deferred == {"worsens-spread": 1}


def test_a_move_may_cost_the_strategies_after_its_own_but_not_those_before() -> None:
    # Spreading web onto the empty m1 makes it a machine all but idle (and strands its room):
    # spread comes first, so the move is made all the same.
    view = region(
        3,
        [On("ads/web", 0, "m0", cpu=400, memory=400), On("ads/web", 1, "m0", cpu=400, memory=400)],
        placements={"web": Placement(spread=Spread(max_skew=1))},
    )
    result = plan(view, {"ads/web/0": "m1", "ads/web/1": "m1"}, only=("spread", "idle", "stranded"))
    assert [(m.source, m.target, m.strategy) for m in result.moves] == [("m0", "m1", "spread")]
    assert result.gains["idle"] == -1
    assert result.gains["stranded"] < 0


def test_a_job_moves_at_most_its_limit_in_a_round() -> None:
    machines = [machine("a", msb="msb0"), machine("b", msb="msb0")]
    machines += [machine(f"m{n}", msb=f"msb{n}") for n in (1, 2, 3)]
    view = region(
        machines,
        [On("ads/web", i, "a" if i < 3 else "b") for i in range(4)],
        placements={"web": Placement(spread=Spread(max_skew=1))},
    )
    targets = {"ads/web/0": "m1", "ads/web/1": "m2", "ads/web/2": "m3"}
    one = plan(view, targets, only=("spread",))
    assert len(one.moves) == 1, "one move of the job a round"
    assert one.gains["spread"] == 1


def test_moves_stop_at_the_limit_per_minute_counting_those_proposed_lately() -> None:
    limits = Limits(per_job=1, per_minute=2)
    both = plan(consolidating(), {"ads/a/0": "m2", "ads/b/0": "m2"}, limits, only=("idle",))
    assert len(both.moves) == 2
    late = plan(
        consolidating(),
        {"ads/a/0": "m2", "ads/b/0": "m2"},
        limits,
        only=("idle",),
        proposed_lately=1,
    )
    assert len(late.moves) == 1
    assert late.deferred == {"limit-per-minute": 1}


def test_a_machine_that_takes_tasks_this_round_is_not_emptied_in_it() -> None:
    # Stranded would empty m0 into m1, then m1 into m2: one hop a round is enough.
    view = region(
        3,
        [
            On("ads/a", 0, "m0", cpu=400, memory=400),
            On("ads/b", 0, "m1", cpu=800, memory=800),
            On("ads/c", 0, "m2", cpu=2000, memory=2000),
        ],
    )
    result = plan(view, {"ads/a/0": "m1", "ads/b/0": "m2"}, only=("stranded",))
    assert [(m.source, m.target) for m in result.moves] == [("m0", "m1")]
    assert result.deferred == {"moved-this-round": 1}


def test_a_job_with_a_task_waiting_for_a_machine_is_not_moved() -> None:
    view = consolidating()
    view.down = {"ads/a": 1}  # its other task was released by a move and is not placed yet
    result = plan(view, {"ads/a/0": "m2", "ads/b/0": "m2"}, only=("idle",))
    assert [m.job for m in result.moves] == ["ads/b"]


def test_a_target_the_round_did_not_read_does_not_fit() -> None:
    result = plan(consolidating(), {"ads/a/0": "m9", "ads/b/0": "m9"}, only=("idle",))
    assert result.moves == []
    assert result.deferred == {"does-not-fit": 2}


def test_moves_proposed_lately_are_counted_from_the_runs_whatever_became_of_them() -> None:
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def move(operation: str | None) -> RebalanceMove:
        return RebalanceMove(
            job="ads/a",
            index=0,
            source="m0",
            target="m1",
            strategy="idle",
            why="",
            operation=operation,
        )

    def run(seconds_ago: float, *, dry_run: bool = False, operations: int = 2) -> RebalanceRun:
        at = now - timedelta(seconds=seconds_ago)
        moves = [move(f"op-{n}") for n in range(operations)]
        moves.append(move(None))  # planned, not proposed
        return RebalanceRun(
            id=f"r{seconds_ago}",
            dry_run=dry_run,
            requested_by="continuous",
            created_at=at,
            updated_at=at,
            moves=moves,
        )

    runs = [run(10), run(50, operations=1), run(70), run(5, dry_run=True)]
    assert proposed_lately(runs, now) == 3
