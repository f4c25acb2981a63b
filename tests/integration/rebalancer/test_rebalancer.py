"""The rebalancer service on a real store, asking a real allocator over gRPC: runs planned and
carried out, moves proposed as MOVE operations, stale ones withdrawn, failover."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from prometheus_client import REGISTRY

from tests.support.allocations import put_allocation
from tests.support.allocator_builders import entitlement, job, machine, put_job
from tests.support.waiting import eventually
from tether.allocator.service import Allocator
from tether.allocator.settings import AllocatorSettings
from tether.model import (
    Allocation,
    OperationKind,
    OperationState,
    Resources,
    Task,
    TaskOperation,
    TaskState,
    TaskStatus,
    from_json,
    to_json,
)
from tether.model.rebalance import RebalanceRun, RunState, StrategyName
from tether.rebalancer.service import Rebalancer
from tether.rebalancer.settings import RebalancerSettings
from tether.store import Store, keys, open_store

SMALL = 512
"""MiB of each task: an eighth of a machine, which leaves both machines all but idle."""


async def run_task(store: Store, handle: str, machine_id: str, index: int = 0) -> None:
    """A task of the job, placed on the machine and running there, as the scheduler and the
    agent would have written it."""
    entitlement_name, name = handle.split("/")
    now = datetime.now(UTC)
    task = Task(
        job=handle,
        index=index,
        generation=1,
        attempt=1,
        machine=machine_id,
        state=TaskState.RUNNING,
        version="1.0",
        updated_at=now,
    )
    status = TaskStatus(
        job=handle,
        index=index,
        machine=machine_id,
        attempt=1,
        state=TaskState.RUNNING,
        updated_at=now,
    )
    await put_allocation(
        store,
        Allocation(machine=machine_id, entitlement=entitlement_name),
        {f"{handle}/{index}": Resources(cpu=500, memory_mib=SMALL)},
    )
    await store.put(keys.task(entitlement_name, name, index), to_json(task))
    await store.put(keys.task_status(entitlement_name, name, index), to_json(status))


@pytest.fixture
async def region(store: Store) -> Store:
    """Machines m0-m3 of 4 GiB in one MSB; jobs ads/a on m0 and ads/b on m1, one task of 512 MiB
    each: emptying m1 into m0 leaves ads one machine busy instead of two all but idle."""
    for n in range(4):
        machine_id = f"m{n}"
        await store.put(keys.machine(machine_id), to_json(machine(machine_id, msb="msb0")))
        await store.put(keys.allocation(machine_id), to_json(Allocation(machine=machine_id)))
    await store.put(keys.entitlement("ads"), to_json(entitlement()))
    for name, machine_id in (("a", "m0"), ("b", "m1")):
        await put_job(store, job(name, count=1, memory=SMALL))
        await run_task(store, f"ads/{name}", machine_id)
    return store


async def run_tasks(store: Store, handle: str, machine_id: str, count: int) -> None:
    """Tasks 0 to count-1 of the job, all on the machine, as `run_task` writes task 0."""
    for index in range(count):
        await run_task(store, handle, machine_id, index)


@pytest.fixture
async def allocator(region: Store, store_url: str) -> AsyncIterator[Allocator]:
    service = Allocator(open_store(store_url), AllocatorSettings(id="allocator-1", lease_ttl_s=3))
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


def rebalancer(store_url: str, **settings: object) -> Rebalancer:
    return Rebalancer(
        open_store(store_url),
        RebalancerSettings(lease_ttl_s=2, **settings),  # type: ignore[arg-type]
    )


async def ask(store: Store, *, dry_run: bool, strategies: list[StrategyName] | None = None) -> str:
    """A pending run, as the frontend writes one; returns its id."""
    now = datetime.now(UTC)
    run = RebalanceRun(
        id=str(uuid.uuid4()),
        dry_run=dry_run,
        strategies=strategies or [],
        requested_by="admin",
        created_at=now,
        updated_at=now,
    )
    await store.put(keys.rebalance_run(run.id), to_json(run))
    return run.id


async def finished(store: Store, run_id: str) -> RebalanceRun:
    async def read() -> RebalanceRun | None:
        kv = await store.get(keys.rebalance_run(run_id))
        run = None if kv is None else from_json(RebalanceRun, kv.value, stored=True)
        return run if run is not None and run.state is not RunState.PENDING else None

    return await eventually(read, what=f"run {run_id} carried out")


async def moves_of(store: Store, name: str) -> list[TaskOperation]:
    found = await store.range(keys.operations_of("ads", name))
    return [from_json(TaskOperation, kv.value, stored=True) for kv in found.kvs]


async def test_a_dry_run_plans_the_moves_and_their_gain_and_proposes_none(
    region: Store, allocator: Allocator, store_url: str
) -> None:
    service = rebalancer(store_url)
    await service.start()
    try:
        run = await finished(region, await ask(region, dry_run=True))
    finally:
        await service.stop()
    assert run.state is RunState.DONE, run.message
    assert [(m.job, m.source, m.target, m.strategy, m.operation) for m in run.moves] == [
        ("ads/b", "m1", "m0", "idle", None)
    ]
    assert (run.before["idle"], run.after["idle"]) == (2, 0)
    assert run.before["stranded"] - run.after["stranded"] == pytest.approx(1.0)
    assert await moves_of(region, "b") == []


async def test_a_run_proposes_each_move_as_an_operation_for_the_controller(
    region: Store, allocator: Allocator, store_url: str
) -> None:
    service = rebalancer(store_url)
    await service.start()
    try:
        run = await finished(region, await ask(region, dry_run=False, strategies=["idle"]))
    finally:
        await service.stop()
    [move] = run.moves
    [operation] = await moves_of(region, "b")
    assert move.operation == operation.id
    assert operation.kind is OperationKind.MOVE
    assert operation.state is OperationState.PENDING_APPROVAL
    assert (operation.tasks, operation.attempt, operation.target_machine) == ([0], 1, "m0")
    assert operation.deadline is None, "only an approval moves it"
    assert operation.reason.startswith("rebalance (idle): m1 of ads is 12% used")
    assert list(run.before) == ["idle"], "the strategies the run named, only"


async def test_a_move_nobody_approved_in_time_is_withdrawn_by_a_later_round(
    region: Store, allocator: Allocator, store_url: str
) -> None:
    service = rebalancer(store_url, move_timeout_s=0.2)
    await service.start()
    try:
        first = await finished(region, await ask(region, dry_run=False, strategies=["idle"]))
        assert first.moves[0].operation is not None
        await asyncio.sleep(0.3)  # the move's time to be approved runs out
        second = await finished(region, await ask(region, dry_run=False, strategies=["idle"]))
    finally:
        await service.stop()
    assert await moves_of(region, "b") == [], "withdrawn"
    # The round read the move open: ads/b may not move in it, and ads/a stays where it is.
    assert (second.moves, second.deferred) == ([], {"no-better-machine": 1})


async def test_without_an_allocator_a_run_fails_and_says_why(region: Store, store_url: str) -> None:
    service = rebalancer(store_url)
    await service.start()
    try:
        run = await finished(region, await ask(region, dry_run=True))
    finally:
        await service.stop()
    assert run.state is RunState.FAILED
    assert "no allocator is registered" in run.message


async def test_a_standby_takes_over_and_carries_out_the_runs(
    region: Store, allocator: Allocator, store_url: str
) -> None:
    first, second = rebalancer(store_url), rebalancer(store_url)
    await first.start()
    await first.leading.wait()
    await second.start()
    try:
        await eventually(lambda: second.election.stood_by > 0, what="the second stands by")
        await first.stop()
        await eventually(second.leading.is_set, what="the standby leads")
        run = await finished(region, await ask(region, dry_run=True))
        assert run.state is RunState.DONE
        assert second.rounds == 1
    finally:
        await first.stop()
        await second.stop()


async def test_a_packed_job_is_planned_back_over_its_domains_by_spread_alone(
    store: Store, store_url: str
) -> None:
    # Four tasks of one job on m0, four MSBs with a machine each. The machine is also all but
    # idle: emptying it is another strategy's plan, which must not be the spread's.
    for n in range(4):
        machine_id = f"m{n}"
        await store.put(keys.machine(machine_id), to_json(machine(machine_id, msb=f"msb{n}")))
        await store.put(keys.allocation(machine_id), to_json(Allocation(machine=machine_id)))
    await store.put(keys.entitlement("ads"), to_json(entitlement()))
    await put_job(store, job("web", count=4, memory=SMALL))
    await run_tasks(store, "ads/web", "m0", 4)
    replica = Allocator(open_store(store_url), AllocatorSettings(id="allocator-1", lease_ttl_s=3))
    await replica.start()
    service = rebalancer(store_url, max_moves_per_job=3)
    await service.start()
    try:
        # Named after idle, spread still ranks first: idle may not undo its moves.
        run = await finished(store, await ask(store, dry_run=True, strategies=["idle", "spread"]))
    finally:
        await service.stop()
        await replica.stop()
    assert run.state is RunState.DONE, run.message
    assert list(run.before) == ["spread", "idle"]
    assert {(m.strategy, m.source) for m in run.moves} == {("spread", "m0")}
    assert sorted(m.target for m in run.moves) == ["m1", "m2", "m3"]
    assert (run.before["spread"], run.after["spread"]) == (3, 0)


async def test_in_continuous_mode_rounds_come_on_their_own_and_are_counted(
    region: Store, allocator: Allocator, store_url: str
) -> None:
    def moves_counted() -> float:
        sample = REGISTRY.get_sample_value("tether_rebalancer_moves_total", {"strategy": "idle"})
        return sample or 0.0

    counted = moves_counted()
    service = rebalancer(store_url, continuous=True, period_s=0.2, strategies=["idle"])
    await service.start()
    try:

        async def continuous_runs() -> list[RebalanceRun]:
            found = await region.range(keys.rebalance_runs())
            runs = [from_json(RebalanceRun, kv.value, stored=True) for kv in found.kvs]
            return [run for run in runs if run.requested_by == "continuous"]

        # Rounds after the first find ads/b's move open and leave the job alone.
        await eventually(continuous_runs, lambda runs: len(runs) >= 3, what="three rounds")
    finally:
        await service.stop()
    [operation] = await moves_of(region, "b")
    assert operation.target_machine == "m0"
    assert moves_counted() - counted == 1
    assert REGISTRY.get_sample_value("tether_rebalancer_measure", {"strategy": "idle"}) == 2
    done = REGISTRY.get_sample_value("tether_rebalancer_rounds_total", {"outcome": "done"})
    assert done is not None
    assert done >= 3
