"""The broker's decisions: what it records for an announced machine, and what it leaves alone."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.machines import heartbeat_of, make_machine
from tether.broker.inventory import (
    HeartbeatMismatch,
    announced_machine,
    overcommitted,
    record_for,
)
from tether.model import (
    Allocation,
    AllocationEntry,
    MachineState,
    Resources,
    Topology,
)


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
    # The record is a validated model, not a partial copy.
    assert record == type(record).model_validate(record.model_dump())


def test_heartbeats_of_other_datacenters_are_ignored() -> None:
    heartbeat = heartbeat_of(make_machine("m1", dc="dc2"))
    assert announced_machine("m1", heartbeat, "dc1") is None
    assert announced_machine("m1", heartbeat, "dc2") == heartbeat.machine


def test_a_heartbeat_under_another_machines_key_is_refused() -> None:
    with pytest.raises(HeartbeatMismatch, match=r"'m2'.*'m1'"):
        announced_machine("m2", heartbeat_of(make_machine("m1")), "dc1")


def test_a_capacity_shrink_below_the_allocation_is_reported() -> None:
    entry = AllocationEntry(job="team/web", index=0, resources=Resources(cpu=3000))
    allocation = Allocation(machine="m1", tasks={entry.task_id: entry})
    assert overcommitted(allocation, Resources(cpu=4000)) == []
    assert overcommitted(allocation, Resources(cpu=2000)) == [
        "cpu: need 3000 millicores, 2000 free"
    ]
