"""The broker and harvest machines, on a real store: a shrink's notice names the tasks that must
move, the lowest priority first; an eviction drains the machine; a report back to normal
withdraws both."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from tests.support.allocations import put_allocation
from tests.support.allocator_builders import job, put_job
from tests.support.brokers import TIMEOUT_S, handled
from tests.support.brokers import broker as broker
from tests.support.machines import heartbeat_of, heartbeating, make_machine, read_machine
from tests.support.waiting import eventually
from tether.broker.service import Broker
from tether.model import (
    AdvanceNotice,
    Allocation,
    Machine,
    MachineState,
    MaintenanceKind,
    Resources,
    drain_id,
    from_json,
    to_json,
)
from tether.model.machine import Harvest
from tether.store import Store, keys

WHOLE = Resources(cpu=4000, memory_mib=8192, disk_gib=100)
SHRINK_ID = drain_id(MaintenanceKind.HARVEST_SHRINK, "m1")
EVICTION_ID = drain_id(MaintenanceKind.EVICTION, "m1")


def harvest_machine(cpu: int, evict_by: datetime | None = None) -> Machine:
    usable = WHOLE.model_copy(update={"cpu": cpu})
    return make_machine("m1", capacity=WHOLE, harvest=Harvest(usable=usable, evict_by=evict_by))


async def notices(store: Store) -> dict[str, AdvanceNotice]:
    found = (await store.range(keys.MAINTENANCE)).kvs
    notices = [from_json(AdvanceNotice, kv.value, stored=True) for kv in found]
    return {notice.id: notice for notice in notices}


async def test_a_shrink_moves_the_lowest_priority_and_an_eviction_drains_the_machine(
    store: Store, broker: Broker
) -> None:
    for name, priority in (("low", 10), ("high", 200)):
        record = job(name)
        await put_job(
            store,
            record.model_copy(
                update={"spec": record.spec.model_copy(update={"priority": priority})}
            ),
        )
    async with heartbeating(store, harvest_machine(4000)) as keeper:

        async def report(machine: Machine) -> None:
            put = await store.put(
                keys.heartbeat("m1"), to_json(heartbeat_of(machine)), lease=keeper.lease
            )
            await handled(broker, put)

        await eventually(
            lambda: read_machine(store, "m1"), bool, timeout_s=TIMEOUT_S, what="machine m1"
        )
        held = {"ads/low/0": Resources(cpu=1000), "ads/high/0": Resources(cpu=2000)}
        await put_allocation(store, Allocation(machine="m1", entitlement="ads"), held)
        assert await notices(store) == {}

        # 2,500 millicores hold the high task, not both: the low one moves, within the notice.
        before = datetime.now(UTC)
        await report(harvest_machine(2500))
        shrink = (await notices(store))[SHRINK_ID]
        assert (shrink.kind, shrink.tasks, shrink.machines) == (
            MaintenanceKind.HARVEST_SHRINK,
            ["ads/low/0"],
            ["m1"],
        )
        notice_s = broker.settings.harvest_notice_s
        assert before + timedelta(seconds=notice_s) <= shrink.start
        machine = await read_machine(store, "m1")
        assert machine is not None
        assert machine.state is MachineState.UP
        assert machine.usable().cpu == 2500

        # The host takes the machine back in a minute: it drains.
        evict_by = datetime.now(UTC) + timedelta(minutes=1)
        await report(harvest_machine(2500, evict_by))
        eviction = (await notices(store))[EVICTION_ID]
        assert (eviction.kind, eviction.start) == (MaintenanceKind.EVICTION, evict_by)
        await eventually(
            lambda: read_machine(store, "m1"),
            lambda found: found is not None and found.state is MachineState.DRAINING,
            timeout_s=TIMEOUT_S,
            what="m1 draining for its eviction",
        )

        # The host changed its mind and gave the share back: both notices go, m1 is up.
        await report(harvest_machine(4000))
        assert await notices(store) == {}
        await eventually(
            lambda: read_machine(store, "m1"),
            lambda found: found is not None and found.state is MachineState.UP,
            timeout_s=TIMEOUT_S,
            what="m1 up again",
        )


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_tasks_left_on_a_machine_when_its_eviction_is_due_are_counted_lost(
    store: Store, broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    lost, evictions = (
        "tether_broker_harvest_lost_tasks_total",
        "tether_broker_harvest_notices_total",
    )
    before = sample(lost), sample(evictions, kind="eviction")
    await put_allocation(
        store, Allocation(machine="m1", entitlement="ads"), {"ads/web/0": Resources(cpu=1000)}
    )
    # No scheduler runs here: nothing moves the task before the host takes the machine.
    evict_by = datetime.now(UTC) + timedelta(seconds=1)
    with caplog.at_level(logging.WARNING, logger="tether.broker"):
        async with heartbeating(store, harvest_machine(4000, evict_by)):
            await eventually(
                lambda: asyncio.sleep(0, sample(lost)),
                lambda counted: counted == before[0] + 1,
                timeout_s=TIMEOUT_S,
                what="the task left on m1 counted lost",
            )
    assert sample(evictions, kind="eviction") == before[1] + 1
    assert "machine m1: evicted with 1 task(s) still on it" in caplog.text
