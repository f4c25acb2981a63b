"""Gavel's round-based mechanism: over rounds each job's time share on each type approaches
the allocation (property-based), gangs and leftovers, and the round scheduler's memory."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.taskcontrol.appsched.gavel.mechanism import Ledger, choose, shares_of
from tether.taskcontrol.appsched.gavel.policies.registry import POLICIES
from tether.taskcontrol.appsched.gavel.problem import AcceleratorJob, Problem
from tether.taskcontrol.appsched.gavel.rounds import RoundScheduler

KINDS = ("k80", "p100", "v100")


def run_rounds(problem: Problem, ledger: Ledger, rounds: int) -> list[dict[str, str]]:
    history: list[dict[str, str]] = []
    for _ in range(rounds):
        history.append(choose(problem, ledger, history[-1] if history else {}))
        ledger.record(history[-1], 1.0)
    return history


@st.composite
def allocations(draw: st.DrawFn) -> tuple[Problem, np.ndarray]:
    """Single-accelerator jobs and a feasible allocation of them: rows sum to at most 1 and
    each type's column to at most its count."""
    counts = {kind: draw(st.integers(1, 4)) for kind in KINDS}
    jobs = draw(st.integers(1, 10))
    raw = np.array(
        draw(
            st.lists(
                st.lists(st.sampled_from([0.0, 0.0, 0.2, 0.5, 1.0]), min_size=3, max_size=3),
                min_size=jobs,
                max_size=jobs,
            )
        )
    )
    raw /= np.maximum(raw.sum(axis=1, keepdims=True), 1.0)
    columns = raw.sum(axis=0)
    limits = np.array([counts[kind] for kind in KINDS], dtype=float)
    raw *= np.minimum(1.0, np.divide(limits, columns, out=np.ones(3), where=columns > 0))
    problem = Problem.of(
        [
            AcceleratorJob(f"j{i}", 1, {kind: 1.0 + k for k, kind in enumerate(KINDS)})
            for i in range(jobs)
        ],
        counts,
    )
    return problem, raw


@settings(max_examples=60, deadline=None)
@given(allocations())
def test_every_job_receives_at_least_its_allocation_over_rounds(
    case: tuple[Problem, np.ndarray],
) -> None:
    problem, allocation = case
    ledger = Ledger()
    ledger.reset(shares_of(problem, allocation))
    rounds = 400
    history = run_rounds(problem, ledger, rounds)
    for round_ in history:
        for kind in problem.accelerators:
            used = sum(1 for chosen in round_.values() if chosen == kind)
            assert used <= problem.counts[problem.accelerators.index(kind)]
    for j, job in enumerate(problem.jobs):
        for k, kind in enumerate(problem.accelerators):
            assert ledger.share(job, kind) >= allocation[j, k] - 0.02, (job, kind)


@st.composite
def filling_allocations(draw: st.DrawFn) -> tuple[Problem, np.ndarray]:
    """Single-accelerator jobs, as many as there are accelerators, and an allocation that keeps
    every accelerator busy: a mix of assignments of each job to one accelerator."""
    counts = {kind: draw(st.integers(1, 3)) for kind in KINDS}
    slots = [column for column, kind in enumerate(KINDS) for _ in range(counts[kind])]
    allocation = np.zeros((len(slots), len(KINDS)))
    mix = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    for weight in mix:
        order = draw(st.permutations(slots))
        allocation[np.arange(len(slots)), order] += weight / sum(mix)
    speeds = {kind: 1.0 + k for k, kind in enumerate(KINDS)}
    jobs = [AcceleratorJob(f"j{i}", 1, speeds) for i in range(len(slots))]
    return Problem.of(jobs, counts), allocation


# The same 60 cases every run: the bound below is what greedy rounds achieve at worst over
# thousands of random ones, too close to it for a fresh draw each run.
@settings(max_examples=60, deadline=None, derandomize=True)
@given(filling_allocations())
def test_shares_converge_to_an_allocation_that_fills_every_accelerator(
    case: tuple[Problem, np.ndarray],
) -> None:
    problem, allocation = case
    assert np.allclose(allocation.sum(axis=0), problem.counts)
    ledger = Ledger()
    ledger.reset(shares_of(problem, allocation))
    run_rounds(problem, ledger, 400)
    # Greedy rounds realise an allocation that keeps every accelerator busy only
    # approximately: over 6,000 drawn cases the worst share was 0.0925 off (0.25 before the
    # stranded-job repair); an exact decomposition of X into rounds is not built.
    for j, job in enumerate(problem.jobs):
        for k, kind in enumerate(problem.accelerators):
            assert ledger.share(job, kind) == pytest.approx(allocation[j, k], abs=0.1)


def test_a_job_stranded_by_greedy_order_gets_its_type_by_moving_another() -> None:
    # Each job is owed half of two types: taken in order, j0 on p100 and j1 on k80 would leave
    # j2 (k80 or p100) only v100, outside its allocation; moving j1 to v100 frees k80 for it.
    problem = Problem.of(
        [AcceleratorJob(f"j{i}", 1, {kind: 1.0 for kind in KINDS}) for i in range(3)],
        dict.fromkeys(KINDS, 1),
    )
    allocation = np.array([[0, 0.5, 0.5], [0.5, 0, 0.5], [0.5, 0.5, 0]])
    ledger = Ledger()
    ledger.reset(shares_of(problem, allocation))
    history = run_rounds(problem, ledger, 2)
    for round_ in history:
        assert all(ledger.fraction(job, kind) > 0 for job, kind in round_.items()), round_


def test_two_jobs_owed_half_a_gpu_each_take_turns_staying_put_when_even() -> None:
    problem = Problem.of(
        [AcceleratorJob("a", 1, {"v100": 1}), AcceleratorJob("b", 1, {"v100": 1})], {"v100": 1}
    )
    ledger = Ledger()
    ledger.reset({"a": {"v100": 0.5}, "b": {"v100": 0.5}})
    turns = [list(chosen) for chosen in run_rounds(problem, ledger, 6)]
    # After round 2 they are even, and the one running keeps running: one restart, not two.
    assert turns == [["a"], ["b"], ["b"], ["a"], ["a"], ["b"]]


def test_a_gang_that_does_not_fit_lets_smaller_jobs_fill_and_leftovers_go_to_the_rest() -> None:
    # 3 V100s: the gang of 4 owed the most cannot run; the two single jobs run, and the third
    # V100 goes to c, which the allocation gave nothing, rather than idle.
    jobs = [
        AcceleratorJob("gang", 4, {"v100": 4}),
        AcceleratorJob("a", 1, {"v100": 1}),
        AcceleratorJob("b", 1, {"v100": 1}),
        AcceleratorJob("c", 1, {"v100": 1, "k80": 0.5}),
    ]
    problem = Problem.of(jobs, {"v100": 3, "k80": 0})
    ledger = Ledger()
    ledger.reset({"gang": {"v100": 1.0}, "a": {"v100": 1.0}, "b": {"v100": 1.0}, "c": {}})
    assert choose(problem, ledger, {}) == {"a": "v100", "b": "v100", "c": "v100"}


def test_a_job_that_fell_behind_goes_first_after_the_allocation_changes() -> None:
    problem = Problem.of(
        [AcceleratorJob("a", 1, {"v100": 1}), AcceleratorJob("b", 1, {"v100": 1})], {"v100": 1}
    )
    ledger = Ledger()
    ledger.reset({"a": {"v100": 0.5}, "b": {"v100": 0.5}})
    ledger.record({"a": "v100"}, 10.0)
    ledger.reset({"a": {"v100": 0.5}, "b": {"v100": 0.5}})
    # Both are now owed alike, but b is 5 s behind from before.
    assert ledger.deficit("b", "v100") == pytest.approx(5.0)
    assert choose(problem, ledger, {"a": "v100"}) == {"b": "v100"}


def test_the_scheduler_solves_again_when_a_measured_throughput_departs_from_the_profile() -> None:
    scheduler = RoundScheduler(POLICIES["max_min_fairness_perf"], {"v100": 1, "k80": 1})
    scheduler.add(AcceleratorJob("a", 1, {"v100": 4.0, "k80": 1.0}), 1_000, now_s=0)
    scheduler.add(AcceleratorJob("b", 1, {"v100": 4.0, "k80": 1.0}), 1_000, now_s=0)
    first = scheduler.plan(0)
    scheduler.record(first, 10)
    solves = scheduler.solves
    on_k80 = next(name for name, kind in first.items() if kind == "k80")
    scheduler.report(on_k80, 10.0, "k80", 10.0)  # 1 step/s, as the profile says
    scheduler.plan(10)
    assert scheduler.solves == solves
    scheduler.report(on_k80, 50.0, "k80", 10.0)  # 4 steps/s: the profile was wrong
    scheduler.plan(20)
    assert scheduler.solves == solves + 1
    assert scheduler.problem(20).throughputs[scheduler.problem(20).jobs.index(on_k80)].tolist() == [
        4.0,
        4.0,
    ]


def test_the_scheduler_counts_steps_left_from_what_a_job_reported() -> None:
    scheduler = RoundScheduler(POLICIES["min_total_duration_perf"], {"v100": 1})
    scheduler.add(AcceleratorJob("a", 1, {"v100": 2.0}), 1_000, now_s=0)
    scheduler.record(scheduler.plan(0), 100)
    scheduler.report("a", 200.0, "v100", 100)
    assert scheduler.problem(100).remaining_steps.tolist() == [800.0]


def test_the_scheduler_refuses_a_gang_no_type_can_hold() -> None:
    scheduler = RoundScheduler(POLICIES["fifo"], {"v100": 2, "k80": 8})
    with pytest.raises(ValueError, match="job big: no accelerator type it runs on has 4"):
        scheduler.add(AcceleratorJob("big", 4, {"v100": 4.0}), 1_000, now_s=0)
    assert not scheduler.jobs
