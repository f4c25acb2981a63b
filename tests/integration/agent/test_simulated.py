"""Simulated machines against a real store: the real agent with an executor that runs no process,
and a fleet of such agents in one process."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.agent.helpers import (
    ENT,
    JOB,
    assign,
    assignment_put,
    task_put,
    unassign,
    wait_status,
)
from tests.integration.agent.helpers import (
    machine as machine,
)
from tests.integration.agent.helpers import (
    region_config as region_config,
)
from tests.support.waiting import eventually
from tether.agent import fanout
from tether.agent.fanout import FleetStore, SharedWatches
from tether.agent.procfs import start_ticks
from tether.agent.service import Agent
from tether.agent.settings import AgentSettings
from tether.agent.simulated import (
    LIMITS,
    SIMULATED_PID_BASE,
    AgentFleet,
    SimulatedExecutor,
    profiled_speed,
    simulated_machines,
)
from tether.agent.workdir import TaskRef
from tether.model import (
    GPU_TYPE_ATTRIBUTE,
    AcceleratorSpec,
    AgentHeartbeat,
    DesiredState,
    Machine,
    RegionConfig,
    Resources,
    TaskState,
    from_json,
)
from tether.model.accelerator import ThroughputProfile
from tether.service import RegionError
from tether.store import CompactedError, LeaseNotFound, Put, Store, Watch, keys, open_store
from tether.store.wrapped import WrappedStore

# A long poll: a simulated executor wakes its agent itself, so nothing here waits for a poll.
SETTINGS = {"lease_ttl_s": 2, "poll_interval_s": 10.0}


@pytest.fixture
async def simulated(
    store_url: str, machine: Machine, tmp_path: Path, region_config: RegionConfig
) -> AsyncIterator[tuple[Agent, SimulatedExecutor]]:
    executor = SimulatedExecutor()
    settings = AgentSettings.model_validate(SETTINGS | {"work_dir": tmp_path / "agent"})
    agent = Agent(machine, settings, open_store(store_url), executor=executor)
    await agent.start()
    try:
        yield agent, executor
    finally:
        with contextlib.suppress(Exception):
            await agent.stop()


async def test_a_simulated_accelerator_task_trains_at_its_profiled_speed(
    store_url: str, store: Store, machine: Machine, tmp_path: Path, region_config: RegionConfig
) -> None:
    profile = ThroughputProfile.parse({"v100": {"ResNet-50": {"1": 40.0}}})
    on_v100 = machine.model_copy(update={"attributes": {GPU_TYPE_ATTRIBUTE: "v100"}})
    executor = SimulatedExecutor(profiled_speed(profile, on_v100))
    settings = AgentSettings.model_validate(SETTINGS | {"work_dir": tmp_path / "agent"})
    agent = Agent(on_v100, settings, open_store(store_url), executor=executor)
    await agent.start()
    try:
        # 100 steps resumed of 140, at 40 a second: done a second later, reporting all 140.
        short = AcceleratorSpec(job_type="ResNet-50", total_steps=140, scale_factor=1)
        await assign(store, on_v100, 0, attempt=1, accelerator=short, progress=100)
        done = await wait_status(store, 0, 1, TaskState.EXITED)
        assert (done.exit_code, done.progress) == (0, 140)
        assert done.finished_at is not None
        assert done.started_at is not None
        # 40 steps at 40 a second: not sooner than a second (later on a loaded machine).
        assert (done.finished_at - done.started_at).total_seconds() >= 0.9
        # Stopped part way, it reports the steps it got to.
        long = short.model_copy(update={"total_steps": 1e9})
        await assign(store, on_v100, 1, attempt=1, accelerator=long)
        await wait_status(store, 1, 1, TaskState.RUNNING)
        await asyncio.sleep(0.5)
        await assign(store, on_v100, 1, attempt=1, accelerator=long, desired=DesiredState.STOPPED)
        stopped = await wait_status(store, 1, 1, TaskState.KILLED)
        assert stopped.progress is not None
        assert 10 <= stopped.progress <= 1e3
        # A job type the profile does not know just runs, reporting nothing.
        unknown = short.model_copy(update={"job_type": "LM"})
        await assign(store, on_v100, 2, attempt=1, accelerator=unknown)
        running = await wait_status(store, 2, 1, TaskState.RUNNING)
        assert running.progress is None
    finally:
        await agent.stop()


async def test_a_simulated_task_runs_without_a_process_and_stops(
    store: Store, simulated: tuple[Agent, SimulatedExecutor], machine: Machine, tmp_path: Path
) -> None:
    _, executor = simulated
    heartbeat = await store.get(keys.heartbeat(machine.id))
    assert heartbeat is not None
    assert from_json(AgentHeartbeat, heartbeat.value, stored=True).address.startswith("nologs://")

    await assign(store, machine, 0, attempt=1)
    running = await wait_status(store, 0, 1, TaskState.RUNNING)
    assert running.pid is not None
    assert running.pid >= SIMULATED_PID_BASE
    assert start_ticks(running.pid) is None  # no such process
    assert running.limits == LIMITS
    assert running.machine == machine.id
    assert not (tmp_path / "agent" / "tasks").exists()  # nothing on disk

    await unassign(store, machine, 0)
    killed = await wait_status(store, 0, 1, TaskState.KILLED)
    assert killed.pid == running.pid
    assert executor.running == []


async def test_a_simulated_exit_is_reported_and_a_new_attempt_runs(
    store: Store, simulated: tuple[Agent, SimulatedExecutor], machine: Machine
) -> None:
    _, executor = simulated
    await assign(store, machine, 0, attempt=1)
    first = await wait_status(store, 0, 1, TaskState.RUNNING)

    assert executor.finish(TaskRef(ENT, JOB, 0), 3)
    failed = await wait_status(store, 0, 1, TaskState.FAILED)
    assert failed.exit_code == 3
    assert not executor.finish(TaskRef(ENT, JOB, 0), 0)  # nothing runs any more

    await assign(store, machine, 0, attempt=2)
    second = await wait_status(store, 0, 2, TaskState.RUNNING)
    assert second.pid != first.pid

    # A stopped assignment that never ran is reported killed, as with real processes.
    await assign(store, machine, 1, attempt=1, desired=DesiredState.STOPPED)
    never = await wait_status(store, 1, 1, TaskState.KILLED)
    assert never.pid is None


async def test_a_simulated_agent_reports_a_pass_of_starts_in_one_transaction(
    store: Store, simulated: tuple[Agent, SimulatedExecutor], machine: Machine
) -> None:
    tasks = range(8)
    await store.txn(
        [],
        [
            put
            for index in tasks
            for put in (task_put(machine, index, 1), assignment_put(machine, index, 1))
        ],
    )
    for index in tasks:
        await wait_status(store, index, 1, TaskState.RUNNING)

    statuses = (await store.range(keys.TASK_STATUS)).kvs
    assert len(statuses) == len(tasks)
    # One transaction claimed them all (`starting`), and one reported them running.
    assert len({kv.create_revision for kv in statuses}) == 1
    assert len({kv.mod_revision for kv in statuses}) == 1
    assert {kv.version for kv in statuses} == {2}


def test_simulated_machines_spread_over_fault_domains_with_fixed_width_ids() -> None:
    machines = simulated_machines(
        200,
        region="r",
        datacenters=["dc1", "dc2"],
        msbs_per_dc=2,
        rack_size=10,
        hardware_type="sim",
        capacity=Resources(cpu=1000, memory_mib=1024),
    )
    ids = [m.id for m in machines]
    assert (ids[0], ids[-1]) == ("sim-001", "sim-200")
    assert not any(a != b and b.startswith(a) for a in ids for b in ids)
    per_msb = Counter((m.topology.dc, m.topology.msb) for m in machines)
    racks = Counter((m.topology.dc, m.topology.msb, m.topology.rack) for m in machines)
    assert per_msb == {(dc, msb): 50 for dc in ("dc1", "dc2") for msb in ("msb1", "msb2")}
    assert set(racks.values()) == {10}
    assert all(machine.attributes == {} for machine in machines)
    typed = simulated_machines(
        6,
        region="r",
        datacenters=["dc1"],
        msbs_per_dc=1,
        rack_size=10,
        hardware_type="sim",
        capacity=Resources(cpu=1000, memory_mib=1024, gpus=1),
        gpu_types=["v100", "k80"],
    )
    kinds = [machine.attributes[GPU_TYPE_ATTRIBUTE] for machine in typed]
    assert kinds == ["v100", "k80"] * 3


async def test_a_fleet_runs_many_agents_on_shared_stores(
    store: Store, store_url: str, tmp_path: Path, region_config: RegionConfig
) -> None:
    machines = simulated_machines(
        12,
        region="r",
        datacenters=["dc1"],
        msbs_per_dc=3,
        rack_size=2,
        hardware_type="sim",
        capacity=Resources(cpu=1000, memory_mib=1024),
        prefix="fleet",
    )
    # A 4 s lease (under the fencing period): twelve agents starting on two cores must not let
    # a shared lease lapse, which would grant a third.
    settings = AgentSettings.model_validate(SETTINGS | {"work_dir": tmp_path / "fleet"})
    progress: list[str] = []
    fleet = AgentFleet(
        machines,
        settings,
        [open_store(store_url), open_store(store_url)],
        starting_at_once=4,
        progress=progress.append,
        lease_ttl_s=4,
    )
    await fleet.start()
    try:
        await asyncio.wait_for(fleet.started.wait(), 60)
        assert len(fleet.agents) == 12
        assert progress[-1].startswith("12 of 12 agents started")
        heartbeats = (await store.range(keys.HEARTBEATS)).kvs
        assert len(heartbeats) == 12
        # One lease per shared store, kept by the store, not one per agent.
        assert len({kv.lease for kv in heartbeats}) == 2
        for index, target in enumerate(machines[::4]):
            await assign(store, target, index, attempt=1)
        for index, target in enumerate(machines[::4]):
            running = await wait_status(store, index, 1, TaskState.RUNNING)
            assert running.machine == target.id
        assert len(fleet.executors[machines[0].id].running) == 1
    finally:
        await fleet.stop()
    # Stopping revokes every heartbeat's lease at once.
    await eventually(
        lambda: store.count(keys.HEARTBEATS),
        lambda count: count == 0,
        timeout_s=10,
        what="the fleet's heartbeats to go",
    )


def two_machines(prefix: str) -> list[Machine]:
    return simulated_machines(
        2,
        region="r",
        datacenters=["dc1"],
        msbs_per_dc=1,
        rack_size=2,
        hardware_type="sim",
        capacity=Resources(cpu=1000, memory_mib=1024),
        prefix=prefix,
    )


async def test_a_fleet_holds_the_regions_fencing_period_as_its_lease_by_default(
    store: Store, store_url: str, tmp_path: Path, region_config: RegionConfig
) -> None:
    machines = two_machines("fence")
    settings = AgentSettings.model_validate(SETTINGS | {"work_dir": tmp_path / "fleet"})
    fleet = AgentFleet(machines, settings, [open_store(store_url)])
    await fleet.start()
    try:
        await asyncio.wait_for(fleet.started.wait(), 60)
        [heartbeat, _] = (await store.range(keys.HEARTBEATS)).kvs
        remaining = await store.lease_time_to_live(heartbeat.lease)
        assert remaining is not None
        assert SETTINGS["lease_ttl_s"] < remaining <= region_config.fencing_s
    finally:
        await fleet.stop()


async def test_a_fleet_whose_lease_outlasts_the_fencing_period_refuses_to_start(
    store: Store, store_url: str, tmp_path: Path, region_config: RegionConfig
) -> None:
    machines = two_machines("long")
    settings = AgentSettings.model_validate(SETTINGS | {"work_dir": tmp_path / "fleet"})
    too_long = int(region_config.fencing_s) + 1
    fleet = AgentFleet(machines, settings, [open_store(store_url)], lease_ttl_s=too_long)
    with pytest.raises(RegionError, match=r"at most 5s \(tether agent-sim --lease-ttl-s\)"):
        await fleet.start()
    await fleet.stop()
    assert await store.count(keys.HEARTBEATS) == 0


async def test_a_fleet_store_gives_each_watch_its_prefix_from_its_revision(store: Store) -> None:
    watches = SharedWatches(store, ["/t/"])
    shared = FleetStore(store, watches)
    start = await store.revision() + 1
    record = shared.watch("/t/a", start_revision=start)  # as an agent's allocation record
    under = shared.watch("/t/b/", start_revision=start)
    for key in ("/t/a", "/t/a/1", "/t/ab", "/t/b/1"):
        await store.put(key, b"x")

    async def keys_of(watch: Watch, count: int) -> list[str]:
        seen: list[str] = []
        while len(seen) < count:
            events = await asyncio.wait_for(anext(watch), 10)
            seen += [event.kv.key for event in events]
        return seen

    try:
        assert await keys_of(record, 2) == ["/t/a", "/t/a/1"]  # not /t/ab
        assert await keys_of(under, 1) == ["/t/b/1"]
        # A watch that starts behind the shared one gets the changes since its start.
        late = shared.watch("/t/b/", start_revision=start)
        assert await keys_of(late, 1) == ["/t/b/1"]
        await store.put("/t/b/2", b"x")
        assert await keys_of(late, 1) == ["/t/b/2"]
        assert await keys_of(under, 1) == ["/t/b/2"]
        # Outside the shared parents, a watch is the store's own.
        assert not isinstance(shared.watch("/u/", start_revision=start), type(under))
    finally:
        await shared.close()
        await watches.stop()


async def test_a_shared_watch_keeps_a_bounded_number_of_changes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fanout, "HISTORY_EVENTS", 3)
    watches = SharedWatches(store, ["/t/"])
    start = await store.revision() + 1
    live = watches.watch("/t/a/", start_revision=start)
    assert live is not None
    revisions = []
    for batch in (["/t/a/1", "/t/a/2"], ["/t/a/3", "/t/a/4"], ["/t/a/5"]):
        result = await store.txn([], [Put(key, b"x") for key in batch])
        revisions.append(result.revision)
    try:
        seen = 0
        while seen < 5:
            seen += len(await asyncio.wait_for(anext(live), 10))
        # Three changes kept, in whole revisions: the first revision's two are gone.
        behind = watches.watch("/t/a/", start_revision=revisions[0])
        assert behind is not None
        with pytest.raises(CompactedError):
            await asyncio.wait_for(anext(behind), 10)
        kept = watches.watch("/t/a/", start_revision=revisions[1])
        assert kept is not None
        events = await asyncio.wait_for(anext(kept), 10)
        assert [e.kv.key for e in events] == ["/t/a/3", "/t/a/4"]
    finally:
        await watches.stop()


class _CountingWatches(WrappedStore):
    """A real store that counts the watches opened through it."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.opened: list[str] = []

    def watch(self, prefix: str, *, start_revision: int) -> Watch:
        self.opened.append(prefix)
        return self.inner.watch(prefix, start_revision=start_revision)


async def test_fleet_stores_on_different_connections_share_one_watch(
    store: Store, store_url: str
) -> None:
    second = open_store(store_url)
    first_counted, second_counted = _CountingWatches(store), _CountingWatches(second)
    watches = SharedWatches(first_counted, ["/t/"])
    fleet = [FleetStore(first_counted, watches), FleetStore(second_counted, watches)]
    start = await store.revision() + 1
    one = fleet[0].watch("/t/a/", start_revision=start)
    other = fleet[1].watch("/t/b/", start_revision=start)
    try:
        await second.put("/t/b/1", b"x")  # written through the other connection
        await store.put("/t/a/1", b"x")
        assert [e.kv.key for e in await asyncio.wait_for(anext(other), 10)] == ["/t/b/1"]
        assert [e.kv.key for e in await asyncio.wait_for(anext(one), 10)] == ["/t/a/1"]
        assert (first_counted.opened, second_counted.opened) == (["/t/"], [])
    finally:
        for fleet_store in fleet:
            await fleet_store.close()
        await watches.stop()
        await second.close()


async def test_a_fleet_store_shares_one_lease_and_grants_another_once_it_lapsed(
    store: Store,
) -> None:
    fleet = FleetStore(store, SharedWatches(store, []))
    try:
        first = await fleet.lease_grant(3)
        assert await fleet.lease_grant(3) == first
        assert await fleet.lease_keepalive(first) == 3
        await fleet.lease_revoke(first)  # an agent that stops: the others keep the lease
        assert await store.lease_time_to_live(first)

        await store.lease_revoke(first)  # it lapses; its keeper notices at the next renewal

        async def renewed() -> BaseException | None:
            try:
                await fleet.lease_keepalive(first)
            except LeaseNotFound as error:
                return error
            return None

        await eventually(renewed, lambda error: error is not None, timeout_s=10, what="lapse")
        second = await fleet.lease_grant(3)
        assert second != first
    finally:
        await fleet.close()
    assert not await store.lease_time_to_live(second)  # closing revokes it
