"""Checking a preemption against the real placement: the preempting job's tasks must find
machines once the victims stop (their entitlement's machines, or machines of others left
empty), within its constraints and as a gang; spare victims are added only as needed."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.allocator_builders import Region, allocation, entitlement, job, machine
from tether.allocator.index import FREE
from tether.allocator.preemption import check_preemption
from tether.model import Constraint, ConstraintOp, Entitlement, Job, Placement, Resources

TASK = Resources(cpu=1000, memory_mib=256)


def layout(region: Region, owner: str, handle: str, machines: dict[str, list[int]]) -> None:
    """Puts the job's tasks (of TASK) on the machines, owned by `owner`."""
    for machine_id, indexes in machines.items():
        tasks = [(handle, index, TASK) for index in indexes]
        region.put_record(machine_id, allocation(machine_id, *tasks, owner=owner))


def two_full_machines(owner: Entitlement, **attributes: str) -> Region:
    """m1 and m2 (4 CPUs each) of `owner`, full with the 8 tasks of `<owner>/low`, the even
    ones on m1 and the odd ones on m2."""
    region = Region().entitle(owner, entitlement("idle"))
    region.add(*(machine(m, attributes=attributes, msb=m) for m in ("m1", "m2")))
    layout(region, owner.name, f"{owner.name}/low", {"m1": [0, 2, 4, 6], "m2": [1, 3, 5, 7]})
    return region


def high(owner: str = "ads", *, count: int = 1, cpu: int = 2000, **fields: object) -> Job:
    return job("high", entitlement=owner, count=count, cpu=cpu, memory=256, **fields)  # type: ignore[arg-type]


def test_victims_spread_over_machines_do_not_make_room_for_a_bigger_task() -> None:
    # Quota-wise two 1-CPU tasks make room for a 2-CPU one; on the machines they free one CPU
    # on each of two machines, and the task fits neither.
    ads = entitlement("ads", cpu=8000)
    region = two_full_machines(ads)
    fit = check_preemption(region.index, region.cache, high(), ads, [0], [("ads/low", 6)])
    assert not fit.fits
    assert "cpu" in fit.reason


def test_spare_victims_are_added_until_the_task_fits_and_no_further() -> None:
    ads = entitlement("ads", cpu=8000)
    region = two_full_machines(ads)
    spare = [("ads/low", 5), ("ads/low", 4), ("ads/low", 2)]
    fit = check_preemption(region.index, region.cache, high(), ads, [0], [("ads/low", 6)], spare)
    # Tasks 5 and up: m1 keeps 0, 2 and 4 (1 CPU free), m2 keeps 1 and 3 (2 CPUs free).
    assert (fit.fits, fit.spare_needed) == (True, 1)


def test_the_victims_free_the_entitlements_own_quota() -> None:
    # The entitlement's quota is all in use by the victims' job: without counting what they
    # free, no task of the preemptor would be allowed.
    ads = entitlement("ads", cpu=8000)
    region = two_full_machines(ads)
    fit = check_preemption(region.index, region.cache, high(cpu=1000), ads, [0], [("ads/low", 7)])
    assert fit.fits


def test_machines_of_another_entitlement_help_only_when_left_empty() -> None:
    other, ads = entitlement("other"), entitlement("ads")
    region = two_full_machines(other)
    region.entitle(ads)
    spread = check_preemption(region.index, region.cache, high(), ads, [0], [("other/low", 6)])
    assert not spread.fits
    # m2 holds the odd tasks: stopping all four of them empties it, and it joins the pool.
    region = Region().entitle(other, ads)
    region.add(machine("m1", msb="m1"), machine("m2", msb="m2"))
    layout(region, "other", "other/low", {"m1": [0, 1, 2, 3], "m2": [4, 5, 6, 7]})
    emptied = check_preemption(
        region.index, region.cache, high(count=2), ads, [0, 1], [("other/low", 4)]
    )
    assert emptied.fits
    left_one = check_preemption(
        region.index, region.cache, high(count=2), ads, [0, 1], [("other/low", 5)]
    )
    assert not left_one.fits


def test_a_constraint_the_freed_machines_do_not_meet_is_named() -> None:
    ads = entitlement("ads", cpu=8000)
    region = two_full_machines(ads, zone="a")
    zone_b = Placement(constraints=[Constraint(attribute="zone", op=ConstraintOp.EQ, value="b")])
    fit = check_preemption(
        region.index,
        region.cache,
        high(cpu=1000, placement=zone_b),
        ads,
        [0],
        [("ads/low", 0)],
        [("ads/low", 0)],
    )
    assert not fit.fits
    assert "zone" in fit.reason


def test_a_gang_fits_whole_or_not_at_all() -> None:
    ads = entitlement("ads", cpu=8000)
    region = two_full_machines(ads)
    gang = Placement(gang=True)
    # Tasks 4 to 7 free 2 CPUs on each machine: room for two 2-CPU tasks, not three.
    three = high(count=3, placement=gang)
    fit = check_preemption(region.index, region.cache, three, ads, [0, 1, 2], [("ads/low", 4)])
    assert not fit.fits
    assert "gang" in fit.reason
    two = high(count=2, placement=gang)
    assert check_preemption(region.index, region.cache, two, ads, [0, 1], [("ads/low", 4)]).fits


def test_the_check_changes_nothing() -> None:
    ads = entitlement("ads", cpu=8000)
    region = two_full_machines(ads)
    used = region.index.used.copy()
    held = region.index.held("ads/low")
    check_preemption(region.index, region.cache, high(), ads, [0], [("ads/low", 0)])
    assert (region.index.used == used).all()
    assert region.index.held("ads/low") == held
    assert region.index.held("ads/high") == {}


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[list[int]], int, int, list[int]]:
    """Machines (tasks of ads/low per machine, by index), the preemptor's task CPUs and count,
    and the first indexes stopped by the victims then by each spare."""
    per_machine = draw(st.lists(st.integers(0, 4), min_size=1, max_size=5))
    machines, next_index = [], 0
    for count in per_machine:
        machines.append(list(range(next_index, next_index + count)))
        next_index += count
    order = draw(st.permutations([i for tasks in machines for i in tasks]))
    # Renumber so that the task indexes are scattered over the machines.
    renumbered = [[order.index(i) for i in tasks] for tasks in machines]
    cpu = draw(st.sampled_from([500, 1000, 2000, 3000]))
    count = draw(st.integers(1, 3))
    firsts = sorted(draw(st.lists(st.integers(0, next_index), min_size=1, max_size=4)))
    return renumbered, cpu, count, firsts[::-1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_when_the_check_says_it_fits_the_tasks_are_placed_once_the_victims_stop(
    scenario: tuple[list[list[int]], int, int, list[int]],
) -> None:
    machines, cpu, count, firsts = scenario
    ads = entitlement("ads")
    region = Region().entitle(ads)
    region.add(*(machine(f"m{n}", msb=f"m{n}") for n in range(len(machines))))
    layout(region, "ads", "ads/low", {f"m{n}": tasks for n, tasks in enumerate(machines)})
    preemptor = high(count=count, cpu=cpu)
    victims, spare = [("ads/low", firsts[0])], [("ads/low", first) for first in firsts[1:]]
    indexes = list(range(count))
    fit = check_preemption(region.index, region.cache, preemptor, ads, indexes, victims, spare)
    if fit.spare_needed:
        # No fewer spare would do.
        fewer = spare[: fit.spare_needed - 1]
        assert not check_preemption(
            region.index, region.cache, preemptor, ads, indexes, victims, fewer
        ).fits
    # Stop the tasks for real, then place as Place does.
    first = min(first for _, first in [*victims, *spare[: fit.spare_needed]])
    index = region.index
    for row, tasks in index.holding("ads/low", []).items():
        stopped = [task for task in tasks if task >= first]
        if stopped:
            region.revision += 1
            header = FREE if int(index.task_count[row]) == len(stopped) else index.header(row)
            index.remove(row, "ads/low", stopped, header, region.revision)
    choice = region.choose(preemptor, ads, indexes)
    assert fit.fits == (not choice.unplaced)
