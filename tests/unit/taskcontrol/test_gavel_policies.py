"""Gavel's policies against cases solved by hand (max-min fairness blind and aware, maximum
throughput, minimum makespan, finish-time fairness, hierarchical, FIFO), and every registered
policy's allocation within the accelerators on random problems."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from tether.taskcontrol.appsched.gavel.policies import (
    fifo,
    finish_time_fairness,
    hierarchical,
    max_min_fairness,
    min_total_duration,
)
from tether.taskcontrol.appsched.gavel.policies.max_sum_throughput import max_sum_throughput
from tether.taskcontrol.appsched.gavel.policies.registry import POLICIES
from tether.taskcontrol.appsched.gavel.problem import AcceleratorJob, Problem

TOLERANCE = 1e-6


def job(
    name: str,
    scale_factor: int = 1,
    weight: float = 1.0,
    left: float = 0.0,
    entity: str = "",
    **speeds: float,
) -> AcceleratorJob:
    return AcceleratorJob(name, scale_factor, speeds, weight, left, entity=entity)


def test_blind_max_min_gives_every_job_the_same_accelerator_time() -> None:
    # One type, 2 GPUs: a gang of 2 gets half the time of a single-GPU job.
    problem = Problem.of([job("a", v100=1), job("b", v100=1), job("c", 2, v100=1)], {"v100": 2})
    allocation = max_min_fairness.agnostic(problem)
    assert allocation[:, 0] == pytest.approx([2 / 3, 2 / 3, 1 / 3], abs=TOLERANCE)


def test_a_blind_policy_does_not_choose_a_type_by_accident() -> None:
    # Blind, a lone job's whole time is as good on either type: it gets the middle of the
    # optimal allocations (as Gavel's interior-point solver gives it), not a vertex that puts
    # it wholly on one type. Aware, it runs on its fastest type.
    problem = Problem.of([job("a", v100=4, k80=1)], {"v100": 1, "k80": 1})
    blind = max_min_fairness.agnostic(problem)
    assert blind[0] == pytest.approx([0.5, 0.5], abs=0.01)
    aware = max_min_fairness.heterogeneity_aware(problem)
    assert aware[0, problem.accelerators.index("v100")] == pytest.approx(1.0, abs=TOLERANCE)


def test_alike_jobs_share_alike_whatever_their_number() -> None:
    # 100 single-GPU jobs and 50 gangs of 2 on 20 GPUs, every job the same accelerator time t:
    # 100 t + 50 * 2 * t / 2 = 20.
    jobs = [job(f"s{n}", v100=1) for n in range(100)] + [job(f"g{n}", 2, v100=1) for n in range(50)]
    allocation = max_min_fairness.agnostic(Problem.of(jobs, {"v100": 20}))
    assert allocation[:100, 0] == pytest.approx([2 / 15] * 100, abs=TOLERANCE)
    assert allocation[100:, 0] == pytest.approx([1 / 15] * 50, abs=TOLERANCE)


def test_a_heavier_weight_gets_a_proportionally_larger_share() -> None:
    problem = Problem.of([job("a", v100=1), job("b", weight=3, v100=1)], {"v100": 1})
    allocation = max_min_fairness.agnostic(problem)
    assert allocation[:, 0] == pytest.approx([0.25, 0.75], abs=TOLERANCE)


def test_the_aware_policy_puts_a_lone_job_on_its_fastest_type() -> None:
    problem = Problem.of([job("a", v100=4, k80=1)], {"v100": 1, "k80": 1})
    allocation = max_min_fairness.heterogeneity_aware(problem)
    # Accelerator types in sorted order: k80, v100.
    assert problem.accelerators == ("k80", "v100")
    assert allocation[0] == pytest.approx([0.0, 1.0], abs=TOLERANCE)


def test_the_aware_policy_gives_each_job_the_type_it_is_relatively_fast_on() -> None:
    # b cannot run on a V100 at all: it takes the K80, and a has the V100 to itself.
    problem = Problem.of([job("a", v100=2, k80=1), job("b", k80=1)], {"v100": 1, "k80": 1})
    allocation = max_min_fairness.heterogeneity_aware(problem)
    assert allocation == pytest.approx(np.array([[0.0, 1.0], [1.0, 0.0]]), abs=TOLERANCE)


def test_the_aware_policy_raises_the_worst_relative_throughput_above_the_blind_one() -> None:
    problem = Problem.of([job("a", v100=10, k80=1), job("b", v100=1, k80=1)], {"v100": 1, "k80": 1})
    baseline = problem.effective_throughputs(problem.equal_share())
    aware = problem.effective_throughputs(max_min_fairness.heterogeneity_aware(problem))
    # a alone on the V100 (10 / 5.5) and b alone on the K80 (1 / 1): nobody below 1.
    assert min(aware / baseline) == pytest.approx(1.0, abs=TOLERANCE)
    assert aware[0] / baseline[0] > 1.5


def test_max_sum_throughput_runs_each_job_where_its_normalized_throughput_is_highest() -> None:
    problem = Problem.of([job("a", v100=10, k80=5), job("b", v100=2, k80=2)], {"v100": 1, "k80": 1})
    allocation = max_sum_throughput(problem)
    assert allocation == pytest.approx(np.array([[0.0, 1.0], [1.0, 0.0]]), abs=TOLERANCE)


def test_min_total_duration_finishes_every_job_at_once_as_early_as_it_can() -> None:
    # 400 steps in all at one step a second on one GPU: both finish at 400 s.
    problem = Problem.of([job("a", left=100, v100=1), job("b", left=300, v100=1)], {"v100": 1})
    allocation = min_total_duration.heterogeneity_aware(problem)
    assert allocation[:, 0] == pytest.approx([0.25, 0.75], abs=TOLERANCE)
    rates = problem.effective_throughputs(allocation)
    assert problem.remaining_steps / rates == pytest.approx([400, 400], rel=1e-6)


def test_the_blind_makespan_plan_takes_every_type_as_fast_as_the_fastest() -> None:
    # b runs only on the V100. Blind, a's K80 looks as fast as its V100, so b keeps the V100 and
    # a the K80 (both "finish" at 50 s). Aware, a's K80 is half as fast: a spends a third of
    # its time on the V100 and both finish at 75 s, instead of a at 100 s.
    jobs = [job("a", left=100, v100=2, k80=1), job("b", left=100, v100=2)]
    problem = Problem.of(jobs, {"v100": 1, "k80": 1})
    k80, v100 = problem.accelerators.index("k80"), problem.accelerators.index("v100")
    blind = min_total_duration.agnostic(problem)
    assert blind[0, [v100, k80]] == pytest.approx([0.0, 1.0], abs=TOLERANCE)
    assert blind[1, [v100, k80]] == pytest.approx([1.0, 0.0], abs=TOLERANCE)
    aware = min_total_duration.heterogeneity_aware(problem)
    assert aware[0, [v100, k80]] == pytest.approx([1 / 3, 2 / 3], abs=TOLERANCE)
    assert problem.effective_throughputs(aware) == pytest.approx([4 / 3, 4 / 3], rel=1e-6)


def test_finish_time_fairness_shortens_the_worst_finish_time_against_the_equal_share() -> None:
    # a runs only on the V100. The equal share gives both jobs 2/3 of a GPU's time (a on the
    # V100, b half on each): 150 s for 100 steps. Alone on a type each, both finish in 100 s.
    problem = Problem.of(
        [job("a", left=100, v100=1), job("b", left=100, v100=1, k80=1)],
        {
            "v100": 1,
            "k80": 1,
        },
    )
    allocation = finish_time_fairness.heterogeneity_aware(problem)
    assert allocation == pytest.approx(np.array([[0.0, 1.0], [1.0, 0.0]]), abs=2e-3)
    equal = problem.effective_throughputs(problem.equal_share())
    ratios = equal / problem.effective_throughputs(allocation)
    assert ratios == pytest.approx([2 / 3, 2 / 3], abs=2e-3)


def test_hierarchical_shares_by_entity_first_and_fills_what_one_cannot_use() -> None:
    # Entity a (one job) and b (three), weighted alike, on 3 GPUs. Half each would give a's
    # job 1.5 GPUs: it can use one (all its time), and b's jobs share the other two.
    jobs = [job("a0", entity="a", v100=1)] + [job(f"b{n}", entity="b", v100=1) for n in range(3)]
    allocation = hierarchical.hierarchical(Problem.of(jobs, {"v100": 3}))
    assert allocation[:, 0] == pytest.approx([1.0, 2 / 3, 2 / 3, 2 / 3], abs=1e-4)
    # On 2 GPUs both entities get one: a's job all the time, b's a third each.
    allocation = hierarchical.hierarchical(Problem.of(jobs, {"v100": 2}))
    assert allocation[:, 0] == pytest.approx([1.0, 1 / 3, 1 / 3, 1 / 3], abs=1e-4)


def test_hierarchical_weighs_entities() -> None:
    # b weighs 3: of 4 GPUs it gets 3, whatever the number of jobs on each side.
    jobs = [job(f"a{n}", entity="a", v100=1) for n in range(4)]
    jobs += [job(f"b{n}", entity="b", v100=1) for n in range(6)]
    allocation = hierarchical.hierarchical(Problem.of(jobs, {"v100": 4}, {"b": 3}))
    assert allocation[:4, 0].sum() == pytest.approx(1.0, abs=1e-3)
    assert allocation[4:, 0].sum() == pytest.approx(3.0, abs=1e-3)


def test_hierarchical_floors_stay_within_reach_together() -> None:
    # Found by the property test below: a frozen at 1 on the K80; b then takes the P100 and
    # a sliver of the K80 (the solver's tolerance), which its floor counted, leaving a's and
    # b's floors together just out of reach of the final program.
    jobs = [job("a", weight=2, k80=1), job("b", k80=3, p100=1), job("idle", v100=0)]
    allocation = hierarchical.hierarchical(Problem.of(jobs, {"k80": 1, "p100": 1, "v100": 0}))
    # Accelerator types in sorted order: k80, p100, v100.
    assert allocation == pytest.approx(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 0]]), abs=1e-4)


def test_fifo_runs_the_oldest_jobs_whole_and_the_aware_one_on_their_fastest_type() -> None:
    jobs = [
        job("a", 2, v100=4, k80=1),
        job("b", v100=2, k80=1),
        job("c", 2, v100=2, k80=1),
        job("d", v100=2, k80=1),
    ]
    problem = Problem.of(jobs, {"v100": 2, "k80": 2})
    k80, v100 = [1.0, 0.0], [0.0, 1.0]
    # Aware: a takes both V100s; b and d the K80s; c's gang of two no longer fits.
    assert fifo.heterogeneity_aware(problem).tolist() == [v100, k80, [0.0, 0.0], k80]
    # Blind: each takes the type with the most free, K80 first on a tie.
    assert fifo.agnostic(problem).tolist() == [k80, v100, [0.0, 0.0], v100]


def test_the_blind_fifo_keeps_a_job_on_the_type_it_ran_on() -> None:
    jobs = [AcceleratorJob("a", 1, {"v100": 1, "k80": 1}, running_on="v100")]
    problem = Problem.of(jobs, {"v100": 1, "k80": 3})
    allocation = fifo.agnostic(problem)
    assert allocation[0, problem.accelerators.index("v100")] == 1.0
    moved = Problem.of([AcceleratorJob("a", 1, {"v100": 1, "k80": 1})], {"v100": 1, "k80": 3})
    assert fifo.agnostic(moved)[0, moved.accelerators.index("k80")] == 1.0


@pytest.mark.parametrize(
    ("gpus", "jobs", "shares"),
    [
        (1, [job("a", v100=1), job("b", weight=3, v100=1)], [0.25, 0.75]),
        (2, [job("a", v100=1), job("c", 2, v100=1)], [1.0, 0.5]),
        (4, [job("a", v100=1), job("b", v100=1)], [1.0, 1.0]),
    ],
)
def test_the_equal_share_is_equal_weighted_accelerator_time(
    gpus: int, jobs: list[AcceleratorJob], shares: list[float]
) -> None:
    problem = Problem.of(jobs, {"v100": gpus})
    assert problem.equal_share()[:, 0] == pytest.approx(shares, abs=1e-9)


@pytest.mark.parametrize(
    ("jobs", "counts", "weights", "named"),
    [
        ([job("bad", 0, v100=1)], {"v100": 1}, {}, "job bad: scale factor 0"),
        ([job("late", left=-1, v100=1)], {"v100": 1}, {}, "job late: a negative"),
        ([job("odd", v100=-2)], {"v100": 1}, {}, "job odd: a negative throughput"),
        ([job("nan", v100=float("nan"))], {"v100": 1}, {}, "job nan: a number that is not"),
        ([job("a", v100=1)], {"v100": -1}, {}, "v100 count -1"),
        ([job("a", v100=1)], {"v100": 1}, {"org": 0}, "entity org weight 0"),
    ],
)
def test_what_no_policy_can_allocate_is_refused_naming_it(
    jobs: list[AcceleratorJob], counts: dict[str, int], weights: dict[str, float], named: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        Problem.of(jobs, counts, weights)


@st.composite
def problems(draw: st.DrawFn) -> Problem:
    types = ["k80", "p100", "v100"]
    counts = {kind: draw(st.integers(0, 4)) for kind in types}
    speeds = st.one_of(st.just(0.0), st.floats(0.1, 50.0))
    jobs = [
        AcceleratorJob(
            f"j{number}",
            draw(st.sampled_from([1, 2, 4])),
            {kind: draw(speeds) for kind in types},
            draw(st.sampled_from([1.0, 2.0, 0.5])),
            draw(st.sampled_from([0.0, 100.0, 5000.0])),
            draw(st.sampled_from([0.0, 60.0, 3600.0])),
            draw(st.sampled_from(["a", "b"])),
        )
        for number in range(draw(st.integers(0, 8)))
    ]
    return Problem.of(jobs, counts, {"a": draw(st.sampled_from([1.0, 3.0]))})


@settings(max_examples=60, deadline=None)
@given(problems(), st.sampled_from(sorted(POLICIES)))
def test_every_allocation_fits_the_accelerators(problem: Problem, name: str) -> None:
    allocation = POLICIES[name](problem)
    assert allocation.shape == problem.shape
    assert (allocation >= 0).all()
    assert (allocation.sum(axis=1) <= 1 + TOLERANCE).all()
    used = (allocation * problem.scale_factors[:, None]).sum(axis=0)
    assert (used <= problem.counts + TOLERANCE).all()
    assert (allocation[~problem.runnable()] <= TOLERANCE).all()


@st.composite
def makespan_problems(draw: st.DrawFn) -> Problem:
    """Jobs of a few job types (rows alike up to a factor: one kind each) with their own steps
    left, some of them far more than the others."""
    counts = {"k80": draw(st.integers(1, 4)), "v100": draw(st.integers(1, 4))}
    types = [{"k80": 1.0, "v100": 4.0}, {"k80": 2.0, "v100": 2.0}, {"v100": 3.0}]
    jobs = [
        AcceleratorJob(
            f"j{number}",
            1,
            draw(st.sampled_from(types)),
            remaining_steps=draw(st.sampled_from([10.0, 100.0, 1000.0, 20_000.0])),
        )
        for number in range(draw(st.integers(1, 10)))
    ]
    return Problem.of(jobs, counts)


@settings(max_examples=60, deadline=None)
@given(makespan_problems())
def test_the_makespan_policy_reaches_the_optimum_of_a_reference_program(problem: Problem) -> None:
    # The makespan program written out with one row a job and solved by scipy's linprog: its
    # optimum, the smallest throughput over steps left, is what the policy reaches. (Grouping
    # jobs of one job type whose steps left differ into one row, each its proportional part,
    # fails this: a job with far more steps left needs the fast type to itself.)
    jobs, types = problem.shape
    values = problem.throughputs / problem.remaining_steps[:, None]
    # Variables: x (jobs x types), then z. Maximize z.
    objective = np.zeros(jobs * types + 1)
    objective[-1] = -1.0
    rows, caps = [], []
    for job in range(jobs):
        row = np.zeros(jobs * types + 1)
        row[job * types : (job + 1) * types] = -values[job]
        row[-1] = 1.0  # z - value <= 0
        rows.append(row)
        caps.append(0.0)
        busy = np.zeros(jobs * types + 1)
        busy[job * types : (job + 1) * types] = 1.0
        rows.append(busy)
        caps.append(1.0)
    for kind in range(types):
        load = np.zeros(jobs * types + 1)
        load[kind : jobs * types : types] = problem.scale_factors
        rows.append(load)
        caps.append(problem.counts[kind])
    bounds = [
        (0.0, 1.0 if problem.throughputs[j, t] > 0 else 0.0)
        for j in range(jobs)
        for t in range(types)
    ]
    reference = linprog(objective, A_ub=np.array(rows), b_ub=caps, bounds=[*bounds, (None, None)])
    assert reference.status == 0
    assert reference.fun is not None
    allocation = min_total_duration.heterogeneity_aware(problem)
    reached = (problem.effective_throughputs(allocation) / problem.remaining_steps).min()
    assert reached == pytest.approx(-reference.fun, rel=1e-5)
    assert (allocation.sum(axis=1) <= 1 + 1e-6).all()
    assert (
        (allocation * problem.scale_factors[:, None]).sum(axis=0) <= problem.counts + 1e-6
    ).all()
