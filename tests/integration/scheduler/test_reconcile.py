"""A leading scheduler reconciles a job through its whole life on a real store and real gRPC."""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY

from tests.integration.scheduler.fake_allocator import FakeAllocator
from tests.integration.scheduler.helpers import make_job, make_machine, put, read
from tests.support.waiting import eventually
from tether.model import (
    Assignment,
    DesiredState,
    MachineState,
    Task,
    TaskState,
    TaskStatus,
)
from tether.scheduler.service import Scheduler
from tether.scheduler.settings import SchedulerSettings
from tether.scheduler.state import ShardState
from tether.store import EventType, Store, keys, open_store

SHARD = "shard-0"
# The only replica: a long lease keeps a loaded machine's stall from ending its term mid-test.
FAST = SchedulerSettings(lease_ttl_s=10, resync_s=0.5, place_retry_s=0.3, allocator_timeout_s=3)


@pytest.fixture
async def scheduler(store_url: str, allocator: FakeAllocator) -> AsyncIterator[Scheduler]:
    replica = Scheduler(open_store(store_url), SHARD, FAST)
    try:
        await replica.start()
        await asyncio.wait_for(replica.leading.wait(), 10)
        yield replica
    finally:
        await replica.stop()


async def tasks_of(store: Store, entitlement: str, job: str) -> dict[int, Task]:
    result = await store.range(keys.tasks_of(entitlement, job))
    tasks = [Task.model_validate_json(kv.value) for kv in result.kvs]
    return {task.index: task for task in tasks}


async def assignment(store: Store, task: Task) -> Assignment | None:
    assert task.machine is not None
    return await read(store, keys.assignment(task.machine, "ads", "web", task.index), Assignment)


async def report(store: Store, task: Task, state: TaskState, exit_code: int | None = None) -> None:
    """Writes the status an agent would for the task's current attempt."""
    assert task.machine is not None
    now = datetime.now(UTC)
    status = TaskStatus(
        job=task.job,
        index=task.index,
        machine=task.machine,
        attempt=task.attempt,
        state=state,
        exit_code=exit_code,
        finished_at=now,
        updated_at=now,
    )
    await put(store, keys.task_status("ads", "web", task.index), status)


async def setup_region(store: Store) -> None:
    for machine_id in ("m1", "m2", "m3"):
        await put(store, keys.machine(machine_id), make_machine(machine_id))
    await store.put(keys.shard_assignment("ads"), SHARD.encode())
    await store.put(keys.shard_assignment("other"), b"shard-1")


async def test_job_lifecycle(store: Store, allocator: FakeAllocator, scheduler: Scheduler) -> None:
    await setup_region(store)
    await put(store, keys.job("ads", "web"), make_job("ads", "web", 3))
    await put(store, keys.job("other", "api"), make_job("other", "api", 2))
    tasks = await _placed(store, count=3)
    await _restart_after_failure(store, tasks[0])
    await _machine_down(store, allocator)
    await _scale_down(store, scheduler)
    await _delete(store)
    # Another shard's job is never touched.
    assert await tasks_of(store, "other", "api") == {}


async def _placed(store: Store, count: int) -> dict[int, Task]:
    async def all_placed() -> dict[int, Task] | None:
        tasks = await tasks_of(store, "ads", "web")
        ok = len(tasks) == count and all(
            t.state is TaskState.PLACED and t.machine is not None for t in tasks.values()
        )
        return tasks if ok else None

    tasks = await eventually(all_placed, what="every task placed")
    # Created on their machines: one write each, with no pending record before it.
    listing = await store.range(keys.tasks_of("ads", "web"))
    assert {kv.version for kv in listing.kvs} == {1}
    for task in tasks.values():
        # The first attempt: one past the store revision the task was created at.
        assert task.attempt > 1
        assert task.generation == 1
        written = await assignment(store, task)
        assert written is not None
        assert (written.attempt, written.desired) == (task.attempt, DesiredState.RUNNING)
    assert {task.machine for task in tasks.values()} == {"m1", "m2", "m3"}
    return tasks


async def _restart_after_failure(store: Store, task: Task) -> None:
    # Before the report, which stamps finished_at: the store's write time, long on a loaded
    # machine, is then inside what is measured rather than taken off the backoff.
    failed_at = time.monotonic()
    await report(store, task, TaskState.FAILED, exit_code=3)

    async def restarted() -> Task | None:
        now = (await tasks_of(store, "ads", "web"))[task.index]
        return now if now.attempt == task.attempt + 1 else None

    again = await eventually(restarted, what="the failed task restarted")
    # backoff_initial_s * 2**0 (0.3 s) after finished_at.
    assert time.monotonic() - failed_at >= 0.29
    assert again.restarts == 1
    assert again.machine == task.machine
    assert again.state is TaskState.PLACED
    written = await assignment(store, again)
    assert written is not None
    assert written.attempt == task.attempt + 1


async def _machine_down(store: Store, allocator: FakeAllocator) -> None:
    before = await tasks_of(store, "ads", "web")
    victim = next(task for task in before.values() if task.machine == "m2")
    down_at = await put(store, keys.machine("m2"), make_machine("m2", MachineState.DOWN))

    async def replaced() -> Task | None:
        now = (await tasks_of(store, "ads", "web"))[victim.index]
        return now if now.machine not in (None, "m2") else None

    moved = await eventually(replaced, what="the lost task placed elsewhere")
    assert moved.attempt == victim.attempt + 1
    assert moved.restarts == victim.restarts
    assert moved.state is TaskState.PLACED
    assert ("ads/web", [victim.index]) in allocator.release_calls
    lost = [t for t in await history(store, victim, down_at) if t.state is TaskState.LOST]
    assert len(lost) == 1
    assert lost[0].machine is None
    assert lost[0].message == "machine m2 is down"
    assert lost[0].attempt == victim.attempt
    assert await store.get(keys.assignment("m2", "ads", "web", victim.index)) is None
    assert await assignment(store, moved) is not None


async def history(store: Store, task: Task, start: int) -> list[Task]:
    """Every version of the task's record written since revision `start`, oldest first."""
    key = keys.task("ads", "web", task.index)
    versions: list[Task] = []
    for revision in range(start, await store.revision() + 1):
        result = await store.range(key, revision=revision)
        records = [Task.model_validate_json(kv.value) for kv in result.kvs if kv.key == key]
        if records and (not versions or versions[-1] != records[0]):
            versions += records
    return versions


async def _scale_down(store: Store, scheduler: Scheduler) -> None:
    await put(store, keys.job("ads", "web"), make_job("ads", "web", 1, generation=2))

    async def stopping() -> dict[int, Task] | None:
        tasks = await tasks_of(store, "ads", "web")
        extra = [tasks[i] for i in (1, 2)]
        return tasks if all(t.desired is DesiredState.STOPPED for t in extra) else None

    tasks = await eventually(stopping, what="the extra tasks stopping")
    assert tasks[0].desired is DesiredState.RUNNING
    for index in (1, 2):
        written = await assignment(store, tasks[index])
        assert written is not None
        assert written.desired is DesiredState.STOPPED
    # Not removed until the agent says the process is gone: not even by a reconcile that saw
    # both tasks stopping (the one that stopped them planned from the records before).
    stopping_at = max(
        kv.mod_revision
        for kv in (await store.range(keys.tasks_of("ads", "web"))).kvs
        if keys.task_of_key(kv.key)[2] in (1, 2)
    )
    await eventually(
        lambda: scheduler.reconciled.get("ads/web", 0) >= stopping_at,
        what="a reconcile of the job with both tasks stopping",
    )
    assert set(await tasks_of(store, "ads", "web")) == {0, 1, 2}
    for index in (1, 2):
        await report(store, tasks[index], TaskState.KILLED, exit_code=-15)

    async def removed() -> bool:
        return set(await tasks_of(store, "ads", "web")) == {0}

    await eventually(removed, what="the extra tasks removed")
    for index in (1, 2):
        assert await assignment(store, tasks[index]) is None
        assert await store.get(keys.task_status("ads", "web", index)) is None


async def _delete(store: Store) -> None:
    start = await store.revision()
    job = make_job("ads", "web", 1, generation=2, deleting=True)
    await put(store, keys.job("ads", "web"), job)

    async def stopped() -> Task | None:
        task = (await tasks_of(store, "ads", "web"))[0]
        return task if task.desired is DesiredState.STOPPED else None

    task = await eventually(stopped, what="the last task stopping")
    await report(store, task, TaskState.KILLED, exit_code=-15)

    async def job_gone() -> bool:
        return await store.get(keys.job("ads", "web")) is None

    await eventually(job_gone, what="the job key deleted")
    assert await tasks_of(store, "ads", "web") == {}
    assert await store.count(keys.statuses_of("ads", "web")) == 0
    assert await store.count(keys.ASSIGNMENTS) == 0
    # The job key went last: just before its deletion no task was left.
    deleted_at = await _deletion_revision(store, keys.job("ads", "web"), start)
    before = await store.range(keys.tasks_of("ads", "web"), revision=deleted_at - 1)
    assert before.kvs == []


async def _deletion_revision(store: Store, key: str, start: int) -> int:
    async with store.watch(key, start_revision=start) as watch:
        async for events in watch:
            for event in events:
                if event.kv.key == key and event.type is EventType.DELETE:
                    return event.revision
    raise AssertionError("watch ended")


async def test_a_deposed_leader_keeps_nothing_of_its_term(
    store: Store, allocator: FakeAllocator, scheduler: Scheduler
) -> None:
    # At scale a term's mirrors are gigabytes: a replica that stands by again must hold none.
    await setup_region(store)
    await put(store, keys.job("ads", "web"), make_job("ads", "web", 3))
    await _placed(store, count=3)
    gc.collect()  # earlier tests' schedulers
    assert _live(ShardState) == 1
    await store.delete(keys.shard_leader(SHARD))  # a failover: the leader stands back

    async def released() -> bool:
        gc.collect()
        return not scheduler.leading.is_set() and _live(ShardState) == 0

    await eventually(released, timeout_s=5, what="the term's state collected")


def _live(cls: type) -> int:
    return sum(1 for thing in gc.get_objects() if type(thing) is cls)


async def test_the_safety_net_sweeps_the_shard_at_a_bounded_pace(
    store_url: str, store: Store, allocator: FakeAllocator
) -> None:
    # Two tasks at one a second: a sweep takes 2 s, so an idle job is reconciled every 2 s
    # (without the pace, every resync_s: 20 times a second).
    settings = FAST.model_copy(update={"resync_s": 0.05, "resync_tasks_per_s": 1})
    await setup_region(store)
    await put(store, keys.job("ads", "web"), make_job("ads", "web", 2))
    replica = Scheduler(open_store(store_url), SHARD, settings)
    await replica.start()
    try:

        async def placed() -> bool:
            tasks = await tasks_of(store, "ads", "web")
            return len(tasks) == 2 and all(t.state is TaskState.PLACED for t in tasks.values())

        await eventually(placed, what="both tasks placed")
        reconciled_at = [await _next_reconcile() for _ in range(4)]
        gaps = [later - earlier for earlier, later in itertools.pairwise(reconciled_at)]
        # The mean of the gaps: each reconcile ends a moment after its sweep marked the job, a
        # moment a loaded machine stretches, so one gap can be short by as much as the one
        # before it was long (2.37 s then 1.85 s on CI); the sweeps' pace does not drift.
        mean_gap = (reconciled_at[-1] - reconciled_at[0]) / len(gaps)
        assert mean_gap >= 2 - 0.3, f"reconciled {gaps} s apart"
    finally:
        await replica.stop()


async def _next_reconcile() -> float:
    """When the next reconcile of any job in this process ends (monotonic)."""

    def done() -> float:
        return REGISTRY.get_sample_value("tether_scheduler_reconcile_duration_seconds_count") or 0

    before = done()
    await eventually(lambda: done() > before, timeout_s=10, what="a reconcile")
    return time.monotonic()
