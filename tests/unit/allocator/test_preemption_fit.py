"""Choosing a preemption's victims by machine: the candidates whose stopping lets the preempting
job's tasks be placed (their entitlement's machines, or machines of others left empty), the
fewest tasks of the lowest tiers, within its constraints, its budget and as a gang."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.allocator_builders import Region, allocation, entitlement, job, machine
from tether.allocator.index import FREE
from tether.allocator.preemption import PreemptionCandidate, PreemptionChoice, choose_preemption
from tether.model import Constraint, ConstraintOp, Entitlement, Job, Placement, Resources

TASK = Resources(cpu=1000, memory_mib=256)
NO_LIMIT = 1000


def layout(region: Region, owner: str, machines: dict[str, list[tuple[str, int]]]) -> None:
    """Puts tasks (job handle, index) of TASK on the machines, owned by `owner`."""
    for machine_id, tasks in machines.items():
        held = [(handle, index, TASK) for handle, index in tasks]
        region.put_record(machine_id, allocation(machine_id, *held, owner=owner))


def whole(*handles: str, tier: int = 0) -> list[PreemptionCandidate]:
    return [PreemptionCandidate(handle, 0, tier) for handle in handles]


def high(owner: str = "ads", *, count: int = 1, cpu: int = 2000, **fields: object) -> Job:
    return job("high", entitlement=owner, count=count, cpu=cpu, memory=256, **fields)  # type: ignore[arg-type]


def choose(
    region: Region,
    preemptor: Job,
    owner: Entitlement,
    candidates: list[PreemptionCandidate],
    budget: int = NO_LIMIT,
) -> PreemptionChoice:
    indexes = list(range(preemptor.spec.count))
    return choose_preemption(
        region.index, region.cache, preemptor, owner, indexes, candidates, budget
    )


def chosen_jobs(choice: PreemptionChoice, candidates: list[PreemptionCandidate]) -> list[str]:
    return [candidates[position].job for position in choice.chosen]


def four_jobs_on_two_machines(owner: Entitlement, **attributes: str) -> Region:
    """m1 and m2 (4 CPUs each) of `owner`, full: jobs a and b (two 1-CPU tasks each) on m1,
    c and d on m2, except that a and c swapped a task, so that each of them spans both."""
    region = Region().entitle(owner, entitlement("idle"))
    region.add(*(machine(m, attributes=attributes, msb=m) for m in ("m1", "m2")))
    name = owner.name
    layout(
        region,
        name,
        {
            "m1": [(f"{name}/a", 0), (f"{name}/c", 1), (f"{name}/b", 0), (f"{name}/b", 1)],
            "m2": [(f"{name}/c", 0), (f"{name}/a", 1), (f"{name}/d", 0), (f"{name}/d", 1)],
        },
    )
    return region


def test_the_victims_share_a_machine_where_the_candidates_order_would_spread_them() -> None:
    # In their order, a and c come first: together they free 2 CPUs, one on each machine, and a
    # 2-CPU task fits neither. b alone empties half of m1.
    ads = entitlement("ads", cpu=8000)
    region = four_jobs_on_two_machines(ads)
    candidates = whole("ads/a", "ads/c", "ads/b", "ads/d")
    choice = choose(region, high(), ads, candidates)
    assert choice.fits
    assert chosen_jobs(choice, candidates) in (["ads/b"], ["ads/d"])


def test_a_lower_tier_goes_before_fewer_tasks() -> None:
    ads = entitlement("ads", cpu=8000)
    region = four_jobs_on_two_machines(ads)
    # b and d cost two tasks each, a and c one each but a higher tier: a and c together free
    # only one CPU a machine, so the cheapest choice within the lowest tier is b or d.
    candidates = [*whole("ads/a", "ads/c", tier=1), *whole("ads/b", "ads/d", tier=0)]
    assert chosen_jobs(choose(region, high(cpu=1000), ads, candidates), candidates) in (
        ["ads/b"],
        ["ads/d"],
    )
    # With the one-task jobs in the lowest tier, one of them is enough for a 1-CPU task.
    candidates = [*whole("ads/a", "ads/c", tier=0), *whole("ads/b", "ads/d", tier=1)]
    assert chosen_jobs(choose(region, high(cpu=1000), ads, candidates), candidates) in (
        ["ads/a"],
        ["ads/c"],
    )


def test_the_budget_bounds_the_tasks_stopped() -> None:
    ads = entitlement("ads", cpu=8000)
    region = four_jobs_on_two_machines(ads)
    candidates = whole("ads/b", "ads/d")
    assert choose(region, high(cpu=2000), ads, candidates, budget=2).fits
    refused = choose(region, high(cpu=2000), ads, candidates, budget=1)
    assert not refused.fits
    assert "at most 1 tasks" in refused.reason


def test_the_victims_free_the_entitlements_own_quota() -> None:
    # The entitlement's quota is all in use by the candidates' jobs: without counting what
    # they free, no task of the preemptor would be allowed.
    ads = entitlement("ads", cpu=8000)
    region = four_jobs_on_two_machines(ads)
    candidates = whole("ads/d")
    choice = choose(region, high(cpu=1000), ads, candidates)
    assert (choice.fits, choice.chosen) == (True, (0,))


def test_a_job_that_fits_already_needs_no_victim() -> None:
    ads = entitlement("ads", cpu=8000)
    region = Region().entitle(ads)
    region.add(machine("m1"))
    choice = choose(region, high(), ads, whole("ads/nothing"))
    assert (choice.fits, choice.chosen) == (True, ())


def test_machines_of_another_entitlement_help_only_when_left_empty() -> None:
    other, ads = entitlement("other"), entitlement("ads")
    region = Region().entitle(other, ads)
    region.add(machine("m1", msb="m1"), machine("m2", msb="m2"))
    # m1 holds four one-task jobs, m2 one job of four tasks and nothing else.
    layout(region, "other", {"m1": [(f"other/s{n}", 0) for n in range(4)]})
    layout(region, "other", {"m2": [("other/big", n) for n in range(4)]})
    candidates = [*whole(*(f"other/s{n}" for n in range(4))), *whole("other/big")]
    choice = choose(region, high(count=2), ads, candidates)
    # Either machine, emptied, stops four tasks: the one job is fewer victims than four.
    assert chosen_jobs(choice, candidates) == ["other/big"]
    # Three of m1's four jobs leave it holding one task: no use to another entitlement.
    partial = whole(*(f"other/s{n}" for n in range(3)))
    assert not choose(region, high(count=2), ads, partial).fits


def test_a_constraint_the_freed_machines_do_not_meet_is_named() -> None:
    ads = entitlement("ads", cpu=8000)
    region = four_jobs_on_two_machines(ads, zone="a")
    zone_b = Placement(constraints=[Constraint(attribute="zone", op=ConstraintOp.EQ, value="b")])
    candidates = whole("ads/a", "ads/b", "ads/c", "ads/d")
    choice = choose(region, high(cpu=1000, placement=zone_b), ads, candidates)
    assert not choice.fits
    assert "zone" in choice.reason


def test_a_gang_fits_whole_or_not_at_all() -> None:
    ads = entitlement("ads", cpu=8000)
    region = four_jobs_on_two_machines(ads)
    gang = Placement(gang=True)
    # b and d free 2 CPUs on each machine: room for two 2-CPU tasks, not three.
    candidates = whole("ads/b", "ads/d")
    three = choose(region, high(count=3, placement=gang), ads, candidates)
    assert not three.fits
    assert "gang" in three.reason
    two = choose(region, high(count=2, placement=gang), ads, candidates)
    assert (two.fits, two.chosen) == (True, (0, 1))


def test_the_choice_changes_nothing() -> None:
    ads = entitlement("ads", cpu=8000)
    region = four_jobs_on_two_machines(ads)
    used = region.index.used.copy()
    held = region.index.held("ads/b")
    choose(region, high(), ads, whole("ads/a", "ads/b"))
    assert (region.index.used == used).all()
    assert region.index.held("ads/b") == held
    assert region.index.held("ads/high") == {}


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[list[str]], int, int, list[int]]:
    """Machines (the job of each 1-CPU task on it, of jobs j0..), the preemptor's task CPUs
    and count, and each job's tier."""
    jobs = draw(st.integers(1, 6))
    machines = draw(
        st.lists(st.lists(st.integers(0, jobs - 1), max_size=4), min_size=1, max_size=5)
    )
    cpu = draw(st.sampled_from([500, 1000, 2000, 3000]))
    count = draw(st.integers(1, 3))
    tiers = draw(st.lists(st.integers(0, 2), min_size=jobs, max_size=jobs))
    return [[f"ads/j{n}" for n in tasks] for tasks in machines], cpu, count, tiers


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_chosen_victims_make_room_and_none_of_them_could_be_spared(
    scenario: tuple[list[list[str]], int, int, list[int]],
) -> None:
    machines, cpu, count, tiers = scenario
    ads = entitlement("ads")
    region = Region().entitle(ads)
    region.add(*(machine(f"m{n}", msb=f"m{n}") for n in range(len(machines))))
    numbered: dict[str, int] = {}
    for n, handles in enumerate(machines):
        tasks = []
        for handle in handles:
            tasks.append((handle, numbered.get(handle, 0)))
            numbered[handle] = numbered.get(handle, 0) + 1
        layout(region, "ads", {f"m{n}": tasks})
    candidates = [PreemptionCandidate(f"ads/j{n}", 0, tier) for n, tier in enumerate(tiers)]
    preemptor = high(count=count, cpu=cpu)
    choice = choose(region, preemptor, ads, candidates)
    if choose(region, preemptor, ads, []).fits:
        assert choice.chosen == ()
    if not choice.fits:
        assert not _fits_with_stopped(machines, candidates, preemptor, ads)
    picked = {candidates[position].job for position in choice.chosen}
    # Stop the chosen tasks for real, then place as Place does.
    index = region.index
    for handle in picked:
        for row, held in index.holding(handle, []).items():
            region.revision += 1
            header = FREE if int(index.task_count[row]) == len(held) else index.header(row)
            index.remove(row, handle, held, header, region.revision)
    placed = region.choose(preemptor, ads, list(range(count)))
    assert choice.fits == (not placed.unplaced)
    if choice.fits and len(choice.chosen) > 1:
        # Each victim was needed: with any one of them running again, the tasks fit no more.
        for position in choice.chosen:
            fewer = [c for p, c in enumerate(candidates) if p in choice.chosen and p != position]
            assert not _fits_with_stopped(machines, fewer, preemptor, ads)


def _fits_with_stopped(
    machines: list[list[str]], stopped: list[PreemptionCandidate], preemptor: Job, ads: Entitlement
) -> bool:
    """Whether the preemptor fits a fresh copy of the region with only `stopped` gone."""
    region = Region().entitle(ads)
    region.add(*(machine(f"m{n}", msb=f"m{n}") for n in range(len(machines))))
    gone = {candidate.job for candidate in stopped}
    numbered: dict[str, int] = {}
    for n, handles in enumerate(machines):
        tasks = []
        for handle in handles:
            if handle not in gone:
                tasks.append((handle, numbered.get(handle, 0)))
            numbered[handle] = numbered.get(handle, 0) + 1
        layout(region, "ads", {f"m{n}": tasks})
    return not region.choose(preemptor, ads, list(range(preemptor.spec.count))).unplaced
