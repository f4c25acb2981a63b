"""The broker, running in-process on each store, records the machines whose agents heartbeat."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta

import orjson
import pytest

from tests.support.allocations import put_allocation
from tests.support.brokers import TIMEOUT_S, handled
from tests.support.brokers import broker as broker
from tests.support.machines import heartbeat_of, heartbeating, make_machine, read_machine
from tests.support.waiting import eventually
from tether.broker.service import Broker
from tether.broker.settings import BrokerSettings
from tether.model import (
    MAX_MAINTENANCE_S,
    AdvanceNotice,
    Allocation,
    BrokerRegistration,
    MachineState,
    MaintenanceKind,
    Resources,
    drain_id,
    from_json,
    to_json,
)
from tether.model.machine import Harvest
from tether.store import Delete, Put, Store, keys, open_store


async def read_allocation(store: Store, machine_id: str) -> Allocation | None:
    kv = await store.get(keys.allocation(machine_id))
    return None if kv is None else from_json(Allocation, kv.value, stored=True)


@pytest.mark.usefixtures("broker")
async def test_a_heartbeat_creates_the_machine_and_an_empty_allocation(store: Store) -> None:
    announced = make_machine("m1")
    async with heartbeating(store, announced):
        machine = await eventually(
            lambda: read_machine(store, "m1"), bool, timeout_s=TIMEOUT_S, what="machine m1"
        )
    assert machine == announced.model_copy(update={"state": MachineState.UP})
    assert await read_allocation(store, "m1") == Allocation(machine="m1")


@pytest.mark.usefixtures("broker")
async def test_a_changed_announcement_is_recorded_and_the_state_kept(store: Store) -> None:
    async with heartbeating(store, make_machine("m1")):
        machine = await eventually(
            lambda: read_machine(store, "m1"), bool, timeout_s=TIMEOUT_S, what="machine m1"
        )
    # The health checker's decision, which the broker keeps.
    assert machine is not None
    decided = machine.model_copy(update={"state": MachineState.DOWN})
    await store.put(keys.machine("m1"), to_json(decided))

    # The agent announces more capacity and the host profile it has switched to.
    bigger = Resources(cpu=16000, memory_mib=65536, disk_gib=100)
    announced = make_machine("m1", capacity=bigger, host_profile_current="web")
    async with heartbeating(store, announced):
        updated = await eventually(
            lambda: read_machine(store, "m1"),
            lambda found: found is not None and found.capacity == bigger,
            timeout_s=TIMEOUT_S,
            what="the new capacity",
        )
    assert updated == announced.model_copy(update={"state": MachineState.DOWN})
    assert updated.host_profile_current == "web"


@pytest.mark.usefixtures("broker")
async def test_a_capacity_shrink_below_the_allocation_is_recorded_with_a_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    async with heartbeating(store, make_machine("m1")):
        await eventually(
            lambda: read_allocation(store, "m1"), bool, timeout_s=TIMEOUT_S, what="allocation"
        )
    allocation = Allocation(machine="m1")
    await put_allocation(store, allocation, {"team/web/0": Resources(cpu=3000)})
    entries = await store.range(keys.allocation_entries("m1"))

    smaller = Resources(cpu=1000, memory_mib=8192, disk_gib=100)
    with caplog.at_level(logging.WARNING, logger="tether.broker"):
        async with heartbeating(store, make_machine("m1", capacity=smaller)):
            await eventually(
                lambda: read_machine(store, "m1"),
                lambda found: found is not None and found.capacity == smaller,
                timeout_s=TIMEOUT_S,
                what="the smaller capacity",
            )
    assert "m1: capacity shrank below what is allocated (cpu: need 3000" in caplog.text
    assert await read_allocation(store, "m1") == allocation
    assert (await store.range(keys.allocation_entries("m1"))).kvs == entries.kvs


async def test_other_datacenters_and_malformed_heartbeats_are_skipped(
    store: Store, broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    await store.put(keys.heartbeat("garbage"), b"{not json")
    with caplog.at_level(logging.ERROR, logger="tether.broker"):
        async with (
            heartbeating(store, make_machine("m2", dc="dc2")),
            heartbeating(store, make_machine("m1")),
        ):
            await eventually(
                lambda: read_machine(store, "m1"), bool, timeout_s=TIMEOUT_S, what="machine m1"
            )
            # The broker writes nothing for the others, and handles pending heartbeats in no set
            # order, so even m1's record does not show that they were handled: the revision up
            # to which it has handled heartbeats does.
            heartbeats = (await store.range(keys.HEARTBEATS)).kvs
            last = max(kv.mod_revision for kv in heartbeats)
            await handled(broker, last)
    assert await store.get(keys.machine("m2")) is None
    assert await store.get(keys.allocation("m2")) is None
    assert await store.get(keys.machine("garbage")) is None
    assert "ignoring malformed heartbeat of machine garbage" in caplog.text


async def test_a_harvest_report_is_recorded_and_a_bad_one_refused_and_logged(
    store: Store, broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    half = Harvest(usable=Resources(cpu=2000, memory_mib=4096, disk_gib=100))
    async with heartbeating(store, make_machine("m1", harvest=half)) as keeper:
        machine = await eventually(
            lambda: read_machine(store, "m1"), bool, timeout_s=TIMEOUT_S, what="machine m1"
        )
        assert machine is not None
        assert machine.harvest == half
        # Reports the model refuses, as a broken agent could put them: more than the
        # hardware's, and a negative amount.
        good = orjson.loads(to_json(heartbeat_of(make_machine("m1", harvest=half))))
        for cpu in (8000, -1):
            bad = good | {"machine": good["machine"] | {"harvest": {"usable": {"cpu": cpu}}}}
            with caplog.at_level(logging.ERROR, logger="tether.broker"):
                put = await store.put(keys.heartbeat("m1"), orjson.dumps(bad), lease=keeper.lease)
                await handled(broker, put)
            assert "ignoring malformed heartbeat of machine m1" in caplog.text
            caplog.clear()
            # Nothing changed: the record keeps the last good report.
            assert await read_machine(store, "m1") == machine


@pytest.mark.usefixtures("broker")
async def test_an_existing_allocation_is_kept_when_the_machine_is_recorded(store: Store) -> None:
    leftover = Allocation(machine="m1", entitlement="team")
    await put_allocation(store, leftover, {"team/web/0": Resources(cpu=1000)})
    entries = await store.range(keys.allocation_entries("m1"))
    async with heartbeating(store, make_machine("m1")):
        await eventually(
            lambda: read_machine(store, "m1"), bool, timeout_s=TIMEOUT_S, what="machine m1"
        )
    assert await read_allocation(store, "m1") == leftover
    assert (await store.range(keys.allocation_entries("m1"))).kvs == entries.kvs


async def test_heartbeats_present_at_start_are_recorded(store: Store, store_url: str) -> None:
    async with heartbeating(store, make_machine("m1")):
        service = Broker(open_store(store_url), BrokerSettings(dc="dc1"))
        await service.start()
        try:
            await eventually(
                lambda: read_machine(store, "m1"), bool, timeout_s=TIMEOUT_S, what="machine m1"
            )
        finally:
            await service.stop()


async def machine_state(store: Store, machine_id: str) -> MachineState | None:
    machine = await read_machine(store, machine_id)
    return None if machine is None else machine.state


async def wait_for_state(store: Store, machine_id: str, state: MachineState) -> None:
    await eventually(
        lambda: machine_state(store, machine_id),
        lambda found: found is state,
        timeout_s=TIMEOUT_S,
        what=f"machine {machine_id} {state.value}",
    )


@pytest.mark.usefixtures("broker")
async def test_maintenance_drains_its_machines_holds_them_for_the_window_and_returns_them(
    store: Store,
) -> None:
    for machine_id, dc in (("m1", "dc1"), ("m2", "dc1"), ("m3", "dc2"), ("m4", "dc1")):
        await store.put(keys.machine(machine_id), to_json(make_machine(machine_id, dc=dc)))
    down = make_machine("m4").model_copy(update={"state": MachineState.DOWN})
    await store.put(keys.machine("m4"), to_json(down))
    # Seconds of room on each side: a broker that first saw the notice after its start, or a
    # test stalled past its end, would skip a state.
    start = datetime.now(UTC) + timedelta(seconds=3)
    notice = AdvanceNotice(
        id="n1",
        machines=["m1", "m3", "m4"],
        start=start,
        duration_s=3,
        kind=MaintenanceKind.REBOOT,
    )
    await store.put(keys.maintenance("n1"), to_json(notice))

    await wait_for_state(store, "m1", MachineState.DRAINING)
    assert datetime.now(UTC) < start
    await wait_for_state(store, "m1", MachineState.MAINTENANCE)
    assert datetime.now(UTC) >= start
    await wait_for_state(store, "m1", MachineState.UP)
    assert datetime.now(UTC) >= notice.end
    # The notice is deleted once over; machines not named, of another datacenter (its own
    # broker's), or down (the health checker's) were never touched.
    await eventually(
        lambda: store.get(keys.maintenance("n1")), lambda kv: kv is None, timeout_s=TIMEOUT_S,
        what="the notice deleted",
    )  # fmt: skip
    assert await machine_state(store, "m2") is MachineState.UP
    assert await machine_state(store, "m3") is MachineState.UP
    assert await machine_state(store, "m4") is MachineState.DOWN


@pytest.mark.usefixtures("broker")
async def test_cancelled_maintenance_returns_its_machines_at_once(store: Store) -> None:
    await store.put(keys.machine("m1"), to_json(make_machine("m1")))
    notice = AdvanceNotice(
        id="n1",
        machines=["m1"],
        start=datetime.now(UTC),
        duration_s=3600,
        kind=MaintenanceKind.HARDWARE,
    )
    await store.put(keys.maintenance("n1"), to_json(notice))
    await wait_for_state(store, "m1", MachineState.MAINTENANCE)
    await store.delete(keys.maintenance("n1"))
    await wait_for_state(store, "m1", MachineState.UP)


async def test_a_broker_started_after_a_cancellation_returns_the_machines(
    store: Store, store_url: str
) -> None:
    held = make_machine("m1").model_copy(update={"state": MachineState.MAINTENANCE})
    await store.put(keys.machine("m1"), to_json(held))
    service = Broker(open_store(store_url), BrokerSettings(dc="dc1"))
    await service.start()
    try:
        await wait_for_state(store, "m1", MachineState.UP)
    finally:
        await service.stop()


def drain_notice(kind: MaintenanceKind, machine_id: str) -> AdvanceNotice:
    """The notice `POST /admin/machines/<id>/<kind>` stores, with a deadline of 0."""
    return AdvanceNotice(
        id=drain_id(kind, machine_id),
        machines=[machine_id],
        start=datetime.now(UTC),
        duration_s=MAX_MAINTENANCE_S,
        kind=kind,
    )


async def test_a_decommissioned_machine_drains_until_its_last_task_is_released(
    store: Store, broker: Broker
) -> None:
    for machine_id in ("m1", "m2", "m3"):
        await store.put(keys.machine(machine_id), to_json(make_machine(machine_id)))
    await put_allocation(
        store, Allocation(machine="m1", entitlement="team"), {"team/web/0": Resources(cpu=1000)}
    )
    await put_allocation(store, Allocation(machine="m2", entitlement="team"))
    for kind, machine_id in (
        (MaintenanceKind.DECOMMISSION, "m1"),
        (MaintenanceKind.DECOMMISSION, "m2"),
        (MaintenanceKind.DRAIN, "m3"),
    ):
        notice = drain_notice(kind, machine_id)
        await store.put(keys.maintenance(notice.id), to_json(notice))

    # Due at once: the empty machine is decommissioned, the one with a task only drains, and
    # a drain's window is not maintenance.
    await wait_for_state(store, "m2", MachineState.DECOMMISSIONED)
    await wait_for_state(store, "m1", MachineState.DRAINING)
    await wait_for_state(store, "m3", MachineState.DRAINING)
    # Looked at again while it holds the task, by the pass that its draining sets off (and
    # then every EMPTY_CHECK_S): it keeps draining.
    draining_at = max(
        kv.mod_revision
        for kv in (await store.range(keys.MACHINES)).kvs
        if keys.last_segment(kv.key) in ("m1", "m3")
    )
    await eventually(
        lambda: broker.maintained_revision,
        lambda seen: seen >= draining_at,
        timeout_s=TIMEOUT_S,
        what="a maintenance pass that saw m1 and m3 draining",
    )
    assert await machine_state(store, "m1") is MachineState.DRAINING
    assert await machine_state(store, "m3") is MachineState.DRAINING

    # The task is released as an allocator releases it: entry deleted, record rewritten.
    released = Allocation(machine="m1", entitlement="team", idle_since=datetime.now(UTC))
    await store.txn(
        [],
        [
            Put(keys.allocation("m1"), to_json(released)),
            Delete(keys.allocation_entry("m1", "team", "web", 0)),
        ],
    )
    await wait_for_state(store, "m1", MachineState.DECOMMISSIONED)
    # The allocation records stay the allocators' to change.
    assert await read_allocation(store, "m1") == released

    # Undone: the notice goes, the machine comes back.
    await store.delete(keys.maintenance(drain_id(MaintenanceKind.DECOMMISSION, "m1")))
    await wait_for_state(store, "m1", MachineState.UP)
    assert await machine_state(store, "m2") is MachineState.DECOMMISSIONED


@pytest.mark.usefixtures("broker")
async def test_a_decommission_outlives_its_window_and_takes_a_dead_machine(store: Store) -> None:
    dead = make_machine("m1").model_copy(update={"state": MachineState.DOWN})
    await store.put(keys.machine("m1"), to_json(dead))
    await put_allocation(store, Allocation(machine="m1"))
    # Scheduled so long ago that its window is over: a decommission is never over.
    notice = drain_notice(MaintenanceKind.DECOMMISSION, "m1").model_copy(
        update={"start": datetime.now(UTC) - timedelta(seconds=MAX_MAINTENANCE_S + 60)}
    )
    await store.put(keys.maintenance(notice.id), to_json(notice))
    await wait_for_state(store, "m1", MachineState.DECOMMISSIONED)
    assert await store.get(keys.maintenance(notice.id)) is not None


async def test_a_running_broker_is_registered_for_its_datacenter(
    store: Store, store_url: str
) -> None:
    # The frontend accepts maintenance of a datacenter's machines only while one is.
    service = Broker(open_store(store_url), BrokerSettings(dc="dc1", lease_ttl_s=2))
    await service.start()
    try:
        [kv] = (await store.range(keys.brokers_of("dc1"))).kvs
        registered = from_json(BrokerRegistration, kv.value, stored=True)
        assert (registered.dc, registered.pid) == ("dc1", os.getpid())
        assert kv.lease, "the registration lives on the broker's lease"
        assert await store.count(keys.brokers_of("dc2")) == 0
    finally:
        await service.stop()
    assert await store.count(keys.brokers_of("dc1")) == 0
