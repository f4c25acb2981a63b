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
from tether.model import MachineState, Resources, Topology, to_json
from tether.store import KeyValue, Store, keys


def test_a_new_machine_is_recorded_up_with_what_its_agent_announced() -> None:
    # The state is not the agent's to say; the profile it switched to is.
    announced = make_machine(state=MachineState.DRAINING, host_profile_current="web")
    record = record_for(announced, None)
    assert record is not None
    assert record == announced.model_copy(update={"state": MachineState.UP})


def test_an_unchanged_machine_needs_no_write() -> None:
    recorded = make_machine(state=MachineState.DOWN, host_profile_current="web")
    assert record_for(make_machine(host_profile_current="web"), recorded) is None


@pytest.mark.parametrize(
    "change",
    [
        {"capacity": Resources(cpu=8000, memory_mib=16384, disk_gib=100)},
        {"hostname": "renamed.example"},
        {"topology": Topology(region="r1", dc="dc1", msb="msb2", rack="r7")},
        {"hardware_type": "gpu-a100"},
        {"attributes": {"os": "linux", "kernel": "6.1"}},
        {"host_profile_current": "batch"},
        {"host_profile_current": None},
    ],
)
def test_a_changed_machine_takes_the_announcement_and_keeps_its_state(
    change: dict[str, Any],
) -> None:
    recorded = make_machine(state=MachineState.DRAINING, host_profile_current="web")
    announced = make_machine(**{"host_profile_current": "web"} | change)
    record = record_for(announced, recorded)
    assert record is not None
    field = next(iter(change))
    assert getattr(record, field) == change[field]
    assert record.state is MachineState.DRAINING
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
    # Two tasks of 1500 millicores each: the entries are summed.
    held = to_json(Resources(cpu=1500))
    entries = [
        KeyValue(keys.allocation_entry("m1", "team", "web", i), held, 1, 1, 1) for i in (0, 1)
    ]
    # Deciding whether to warn reads nothing from the store.
    broker = Broker(cast(Store, object()), BrokerSettings(dc="dc1"))
    with caplog.at_level(logging.WARNING, logger="tether.broker"):
        broker._warn_if_overcommitted(make_machine("m1", capacity=Resources(cpu=cpu)), entries)
    assert [record.getMessage() for record in caplog.records] == [
        f"machine m1: {warning}" for warning in warnings
    ]


def test_a_malformed_allocation_entry_is_reported_instead_of_a_shrink(
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = keys.allocation_entry("m1", "team", "web", 0)
    broker = Broker(cast(Store, object()), BrokerSettings(dc="dc1"))
    with caplog.at_level(logging.WARNING, logger="tether.broker"):
        broker._warn_if_overcommitted(
            make_machine("m1", capacity=Resources(cpu=0)), [KeyValue(key, b"{not json", 1, 1, 1)]
        )
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert record.getMessage().startswith(f"machine m1: malformed allocation entry {key}: ")
