"""The broker's decisions: what it records for an announced machine, what it leaves alone, and
when it warns."""

from __future__ import annotations

import logging
from typing import Any, cast

import pytest

from tests.support.machines import heartbeat_of, make_machine
from tether.broker.inventory import HeartbeatMismatch, announced_machine, record_for
from tether.broker.service import Broker
from tether.broker.settings import BrokerSettings
from tether.model import (
    Allocation,
    AllocationEntry,
    MachineState,
    Resources,
    Topology,
    to_json,
)
from tether.store import KeyValue, Store, keys


def test_a_new_machine_is_recorded_up_in_the_free_pool() -> None:
    # Whatever the agent put in the fields it does not own is not taken over.
    announced = make_machine(
        state=MachineState.DRAINING, entitlement="team", host_profile_target="gpu"
    )
    record = record_for(announced, None)
    assert record is not None
    assert record.state is MachineState.UP
    assert (record.entitlement, record.host_profile_target) == (None, None)
    assert record.model_dump(include={"id", "hostname", "topology", "capacity", "attributes"}) == (
        announced.model_dump(include={"id", "hostname", "topology", "capacity", "attributes"})
    )
    assert record.hardware_type == announced.hardware_type


def test_an_unchanged_machine_needs_no_write() -> None:
    recorded = make_machine(state=MachineState.DOWN, entitlement="team")
    assert record_for(make_machine(), recorded) is None


@pytest.mark.parametrize(
    "change",
    [
        {"capacity": Resources(cpu=8000, memory_mib=16384, disk_gib=100)},
        {"hostname": "renamed.example"},
        {"topology": Topology(region="r1", dc="dc1", msb="msb2", rack="r7")},
        {"hardware_type": "gpu-a100"},
        {"attributes": {"os": "linux", "kernel": "6.1"}},
    ],
)
def test_a_changed_machine_keeps_state_entitlement_and_host_profiles(
    change: dict[str, Any],
) -> None:
    recorded = make_machine(
        state=MachineState.DRAINING,
        entitlement="team",
        host_profile_current="web",
        host_profile_target="batch",
    )
    record = record_for(make_machine(**change), recorded)
    assert record is not None
    field = next(iter(change))
    assert getattr(record, field) == change[field]
    assert record.state is MachineState.DRAINING
    assert record.entitlement == "team"
    assert (record.host_profile_current, record.host_profile_target) == ("web", "batch")
    # Nothing else changes: the record is the recorded one with the announced change.
    assert record == recorded.model_copy(update=change)


def test_heartbeats_of_other_datacenters_are_ignored() -> None:
    heartbeat = heartbeat_of(make_machine("m1", dc="dc2"))
    assert announced_machine("m1", heartbeat, "dc1") is None
    assert announced_machine("m1", heartbeat, "dc2") == heartbeat.machine


def test_a_heartbeat_under_another_machines_key_is_refused() -> None:
    with pytest.raises(HeartbeatMismatch, match=r"'m2'.*'m1'"):
        announced_machine("m2", heartbeat_of(make_machine("m1")), "dc1")


@pytest.mark.parametrize(
    ("cpu", "warnings"),
    [
        (4000, []),
        (2000, ["capacity shrank below what is allocated (cpu: need 3000 millicores, 2000 free)"]),
    ],
)
def test_a_capacity_shrink_below_the_allocation_is_reported(
    caplog: pytest.LogCaptureFixture, cpu: int, warnings: list[str]
) -> None:
    entry = AllocationEntry(job="team/web", index=0, resources=Resources(cpu=3000))
    allocation = Allocation(machine="m1", tasks={entry.task_id: entry})
    stored = KeyValue(keys.allocation("m1"), to_json(allocation), 1, 1, 1)
    # Deciding whether to warn reads nothing from the store.
    broker = Broker(cast(Store, object()), BrokerSettings(dc="dc1"))
    with caplog.at_level(logging.WARNING, logger="tether.broker"):
        broker._warn_if_overcommitted(make_machine("m1", capacity=Resources(cpu=cpu)), stored)
    assert [record.getMessage() for record in caplog.records] == [
        f"machine m1: {warning}" for warning in warnings
    ]
