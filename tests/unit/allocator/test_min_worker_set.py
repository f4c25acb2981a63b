"""Min-Worker-Set: a job that asks for it places new tasks on the machines already running its
tasks, before the tightest fit; a job that does not is placed as before."""

from __future__ import annotations

from tests.support.allocator_builders import Region, allocation, entitlement, job, machine
from tether.model import Job, Placement, Resources


def three_machines() -> Region:
    """m1, m2 and m3 of ads in one MSB: m1 the tightest fit (another job holds most of its
    memory), m2 running task 0 of ads/svc, m3 empty."""
    ads = entitlement("ads")
    region = Region().entitle(ads).add(machine("m1"), machine("m2"), machine("m3"))
    other = ("ads/other", 0, Resources(memory_mib=3000))
    region.put_record("m1", allocation("m1", other, owner="ads"))
    running = ("ads/svc", 0, Resources(cpu=500, memory_mib=256))
    region.put_record("m2", allocation("m2", running, owner="ads"))
    region.put_record("m3", allocation("m3", owner="ads"))
    return region


def svc(min_worker_set: bool) -> Job:
    placement = Placement(min_worker_set=min_worker_set)
    return job("svc", count=3, cpu=500, memory=256, placement=placement)


def test_new_tasks_go_where_the_job_runs_already() -> None:
    region = three_machines()
    ads = entitlement("ads")
    choice = region.choose(svc(min_worker_set=True), ads, [1, 2])
    assert set(choice.placements.values()) == {region.row("m2")}
    # Explain names the bit.
    explanation = region.explain(svc(min_worker_set=True), ads)
    [counted] = [p for p in explanation.preferences if "min worker set" in p.rule]
    assert counted.matching == 1


def test_without_it_the_tightest_fit_comes_first() -> None:
    region = three_machines()
    choice = region.choose(svc(min_worker_set=False), entitlement("ads"), [1, 2])
    assert set(choice.placements.values()) == {region.row("m1")}
