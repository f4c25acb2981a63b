"""Allocation entries no task will claim (a Place that committed after the scheduler released
and deleted its tasks) are removed by the replica's tidying, two passes after it first finds
them; entries a task may still claim stay."""

from __future__ import annotations

from tests.integration.allocator.test_held_twice import GIB, entries, entries_become, put_task
from tests.support.allocations import put_allocation, read_allocations
from tests.support.allocator_builders import job, put_job
from tests.support.waiting import eventually
from tether.allocator.service import Allocator
from tether.model import Allocation
from tether.store import Store, keys


async def hold(region: Store, machine_id: str, *task_ids: str) -> None:
    await put_allocation(
        region,
        Allocation(machine=machine_id, entitlement="ads"),
        dict.fromkeys(task_ids, GIB),
    )


async def test_the_entries_of_a_job_that_is_gone_are_released(
    region: Store, allocator: Allocator
) -> None:
    # ads/web/0 has no record yet: its job wants it, so a Place may have just committed it.
    await hold(region, "m0", "ads/gone/0", "ads/web/0")
    await hold(region, "m1", "ads/gone/1")

    # Both jobs are checked in every pass: the pass that releases ads/gone kept ads/web/0.
    await entries_become(region, {"m0": ["ads/web/0"]}, "ads/gone's entries to be released")
    memory = allocator.index.dimension_of["memory"]
    assert int(allocator.index.usage_of("ads")[memory]) == 1024


async def test_tasks_beyond_the_count_without_a_record_are_released(
    region: Store, allocator: Allocator
) -> None:
    # ads/web counts 3 tasks. Task 4 still has its record (stopping after a scale-down), task
    # 5 has none.
    await put_task(region, 4, "m1")
    await hold(region, "m1", "ads/web/4", "ads/web/5")

    await entries_become(region, {"m1": ["ads/web/4"]}, "ads/web/5's entry to be released")


async def test_a_deleting_jobs_entries_without_a_record_are_released(
    region: Store, allocator: Allocator
) -> None:
    await put_job(region, job(deleting=True, generation=2))
    await put_task(region, 1, "m2")
    await hold(region, "m2", "ads/web/0", "ads/web/1")

    await entries_become(region, {"m2": ["ads/web/1"]}, "ads/web/0's entry to be released")


async def test_nothing_is_released_once_a_record_it_judged_by_changed(
    region: Store, allocator: Allocator
) -> None:
    judged = await region.get(keys.job("ads", "web"))
    assert judged is not None
    # Scaled up after a sweep read the job: task 7 is wanted now (so no pass removes it).
    await put_job(region, job(count=8, generation=2))
    now = await region.get(keys.job("ads", "web"))
    assert now is not None
    await hold(region, "m3", "ads/web/7")

    async def held() -> dict[int, int]:
        return allocator.index.held("ads/web")

    await eventually(held, lambda now: 7 in now, timeout_s=10, what="task 7 in the index")
    task_missing = {keys.task("ads", "web", 7): 0}

    stale = await allocator.engine.remove_unclaimed(
        "ads/web", [7], {keys.job("ads", "web"): judged.mod_revision, **task_missing}
    )
    assert stale == 0
    assert "ads/web/7" in (await read_allocations(region))["m3"].tasks

    current = await allocator.engine.remove_unclaimed(
        "ads/web", [7], {keys.job("ads", "web"): now.mod_revision, **task_missing}
    )
    assert current == 1
    assert "m3" not in entries(await read_allocations(region))
