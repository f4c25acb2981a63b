"""The columnar index: machine and allocation records become columns and the sets around them."""

from __future__ import annotations

import numpy as np

from tests.support.allocator_builders import Region, allocation, entitlement, job, machine
from tether.allocator.index import ABSENT, NONE, UP, AllocationIndex
from tether.model import Allocation, MachineState, Resources, from_json, to_json
from tether.store import KeyValue, keys

GIB = Resources(memory_mib=1024)


def memory(region: Region, machine_id: str) -> tuple[int, int]:
    """(capacity, used) of the machine's memory column (and its free column agrees)."""
    index = region.index
    row, column = region.row(machine_id), index.dimension_of["memory"]
    capacity, used = int(index.capacity[row, column]), int(index.used[row, column])
    assert int(index.free[row, column]) == capacity - used
    return capacity, used


def usage(region: Region, name: str) -> dict[str, int]:
    amounts = region.index.usage_of(name)
    return {label: int(amounts[i]) for i, label in enumerate(region.index.dimensions) if amounts[i]}


def test_machine_record_fills_the_columns() -> None:
    region = Region().add(
        machine(
            "m1",
            dc="dc2",
            msb="msb3",
            rack="r4",
            memory=8192,
            cpu=16000,
            disk=100,
            gpus=2,
            hardware="gpu",
            attributes={"zone": "a"},
            profile="fast",
        )
    )
    index, row = region.index, region.row("m1")
    assert dict(zip(index.dimensions, index.capacity[row].tolist(), strict=True)) == {
        "cpu": 16000,
        "memory": 8192,
        "disk": 100,
        "gpus": 2,
    }
    assert index.state[row] == UP
    assert index.dcs.name(int(index.dc[row])) == "dc2"
    assert index.msbs.name(int(index.msb[row])) == "dc2/msb3"
    assert index.racks.name(int(index.rack[row])) == "dc2/msb3/r4"
    assert index.msb_dc[int(index.msb[row])] == index.dc[row]
    assert index.rack_msb[int(index.rack[row])] == index.msb[row]
    assert index.hardware.name(int(index.hw[row])) == "gpu"
    assert index.profiles.name(int(index.profile[row])) == "fast"
    assert index.attribute_values["zone"].name(int(index.attributes["zone"][row])) == "a"
    # A new machine without a record is in the free pool of its MSB.
    assert index.owner[row] == NONE
    assert index.pool_rows(int(index.msb[row])) == {row}
    assert index.machines_present() == ["m1"]


def test_same_rack_name_under_two_msbs_is_two_racks() -> None:
    region = Region().add(machine("a", msb="msb1", rack="r1"), machine("b", msb="msb2", rack="r1"))
    index = region.index
    assert index.rack[region.row("a")] != index.rack[region.row("b")]


def test_machine_changes_move_it_between_pools_and_states() -> None:
    region = Region().add(machine("m1", msb="msb1", attributes={"zone": "a", "ssd": "1"}))
    index, row = region.index, region.row("m1")
    old_msb = int(index.msb[row])
    region.add(machine("m1", msb="msb2", state=MachineState.DRAINING, attributes={"zone": "b"}))
    new_msb = int(index.msb[row])
    assert index.pool_rows(old_msb) == set()
    assert index.pool_rows(new_msb) == {row}
    assert index.state[row] != UP
    assert index.attribute_values["zone"].name(int(index.attributes["zone"][row])) == "b"
    # An attribute the machine no longer has is missing, not kept.
    assert index.attributes["ssd"][row] == NONE


def test_deleted_or_invalid_machine_leaves_the_live_rows() -> None:
    region = Region().add(machine("m1"), machine("m2"))
    index = region.index
    index.set_machine("m2", None)
    assert index.state[region.row("m2")] == ABSENT
    assert index.machines_present() == ["m1"]
    index.set_machine("m1", b"garbage")
    assert index.machines_present() == []
    # A record naming another machine is not that machine.
    index.set_machine("m1", to_json(machine("m9")))
    assert index.machines_present() == []
    index.set_machine("m1", to_json(machine("m1")))
    assert index.machines_present() == ["m1"]
    # Deleting a machine never seen adds no row.
    index.set_machine("ghost", None)
    assert "ghost" not in index.row_of


def test_allocation_record_sets_used_owner_jobs_and_usage() -> None:
    region = Region().add(machine("m1"), machine("m2", hardware="big"))
    index = region.index
    m1, m2 = region.row("m1"), region.row("m2")
    record = allocation("m1", ("ads/web", 0, GIB), ("ml/x", 3, Resources(cpu=250)), owner="ads")
    revision = region.put_record("m1", record)
    assert memory(region, "m1") == (4096, 1024)
    assert int(index.used[m1, index.dimension_of["cpu"]]) == 250
    assert index.revision[m1] == revision
    assert index.task_count[m1] == 2
    ads = index.owners.find("ads")
    assert index.owner[m1] == ads
    assert index.owned_rows(ads) == {m1}
    assert index.owned_hardware(ads) == {index.hardware.find("std"): 1}
    assert m1 not in index.pool_rows(int(index.msb[m1]))
    assert {job: index.held(job) for job in index.jobs_held()} == {
        "ads/web": {0: m1},
        "ml/x": {3: m1},
    }
    assert index.placements("ads/web") == {0: "m1"}
    assert usage(region, "ads") == {"memory": 1024}
    assert usage(region, "ml") == {"cpu": 250}
    # The record the index writes back is the one stored.
    assert from_json(Allocation, index.header_json(m1)) == record.header

    region.put_record("m2", allocation("m2", ("ads/web", 1, GIB), owner="ads"))
    assert index.owned_rows(ads) == {m1, m2}
    assert usage(region, "ads") == {"memory": 2048}
    # Task 0 leaves m1 and the machine returns to the free pool.
    region.put_record("m1", allocation("m1", ("ml/x", 3, Resources(cpu=250))))
    assert index.placements("ads/web") == {1: "m2"}
    assert usage(region, "ads") == {"memory": 1024}
    assert memory(region, "m1") == (4096, 0)
    assert index.owner[m1] == NONE
    assert index.owned_rows(ads) == {m2}
    assert index.owned_hardware(ads) == {
        index.hardware.find("std"): 0,
        index.hardware.find("big"): 1,
    }
    assert m1 in index.pool_rows(int(index.msb[m1]))


def test_own_commit_echo_and_old_events_change_nothing() -> None:
    region = Region().add(machine("m1"))
    index, row = region.index, region.row("m1")
    ads = entitlement("ads")
    region.entitle(ads)
    choice = region.choose(job(count=1), ads)
    revision = region.commit(job(count=1), ads, choice)
    assert index.placements("ads/web") == {0: "m1"}
    # The watch then delivers the commit itself: the record and its entry, already applied.
    entry = keys.allocation_entry("m1", "ads", "web", 0)
    echo = [
        (keys.allocation("m1"), region.store[keys.allocation("m1")]),
        (entry, region.store[entry]),
    ]
    for key, value in echo:
        index.set_allocation(
            key[len(keys.ALLOCATIONS) :], KeyValue(key, value, 1, revision, 1), revision
        )
    assert memory(region, "m1") == (4096, 1024)
    assert index.task_count[row] == 1
    # An older record, or the deletion of an entry before the commit, is ignored.
    older = KeyValue(keys.allocation("m1"), to_json(allocation("m1").header), 1, revision - 1, 1)
    index.set_allocation("m1", older, revision - 1)
    index.set_allocation("m1/ads/web/0", None, revision - 1)
    assert index.revision[row] == revision
    assert index.owner[row] == index.owners.find("ads")
    assert index.placements("ads/web") == {0: "m1"}
    # A deletion after it applies.
    index.set_allocation("m1/ads/web/0", None, revision + 1)
    index.set_allocation("m1", None, revision + 1)
    assert index.revision[row] == 0
    assert index.placements("ads/web") == {}
    assert usage(region, "ads") == {}
    assert memory(region, "m1") == (4096, 0)
    assert index.owner[row] == NONE
    assert row in index.pool_rows(int(index.msb[row]))
    assert index.records_present() == []


def test_entries_of_a_transaction_apply_whichever_comes_first() -> None:
    region = Region().add(machine("m1"))
    index, row = region.index, region.row("m1")
    header = to_json(allocation("m1", owner="ads").header)
    entry = to_json(GIB)
    record_kv = KeyValue(keys.allocation("m1"), header, 1, 5, 1)
    # The record first, then its entry at the same revision.
    index.set_allocation("m1", record_kv, 5)
    index.set_allocation("m1/ads/web/0", KeyValue("e", entry, 5, 5, 1), 5)
    assert memory(region, "m1") == (4096, 1024)
    # An entry of a later transaction before its record.
    index.set_allocation("m1/ads/web/1", KeyValue("e", entry, 6, 6, 1), 6)
    index.set_allocation("m1", KeyValue(keys.allocation("m1"), header, 1, 6, 2), 6)
    assert memory(region, "m1") == (4096, 2048)
    assert index.task_count[row] == 2
    assert index.revision[row] == 6


def test_a_task_held_on_two_machines_counts_on_both_until_one_goes() -> None:
    region = Region().add(machine("m1"), machine("m2"))
    region.put_record("m1", allocation("m1", ("ads/web", 0, GIB), owner="ads"))
    region.put_record("m2", allocation("m2", ("ads/web", 0, GIB), owner="ads"))
    assert memory(region, "m1") == memory(region, "m2") == (4096, 1024)
    assert usage(region, "ads") == {"memory": 2048}
    region.put_record("m2", allocation("m2", owner="ads"))
    assert memory(region, "m2") == (4096, 0)
    assert region.index.placements("ads/web") == {0: "m1"}
    region.put_record("m1", allocation("m1", owner="ads"))
    assert memory(region, "m1") == (4096, 0)
    assert region.index.placements("ads/web") == {}
    assert usage(region, "ads") == {}


def test_tasks_without_resources_come_and_go() -> None:
    region = Region().add(machine("m1"))
    index = region.index
    region.put_record(
        "m1", allocation("m1", ("ads/web", 0, Resources()), ("ads/web", 1, Resources()))
    )
    assert index.placements("ads/web") == {0: "m1", 1: "m1"}
    region.put_record("m1", allocation("m1"))
    assert index.placements("ads/web") == {}
    assert not index.usage_of("ads").any()


def test_unreadable_record_takes_the_machine_out_until_fixed() -> None:
    region = Region().add(machine("m1"))
    index, row = region.index, region.row("m1")
    region.put_record("m1", allocation("m1", ("ads/web", 0, GIB), owner="ads"))
    region.put_record("m1", b"{not json")
    assert not index.readable[row]
    # Its entries still hold their resources.
    assert index.placements("ads/web") == {0: "m1"}
    # A valid JSON record of another machine is unreadable here as well.
    region.put_record("m1", to_json(allocation("m2").header))
    assert not index.readable[row]
    region.put_record("m1", allocation("m1", ("ads/web", 0, GIB), owner="ads"))
    assert index.readable[row]
    assert memory(region, "m1") == (4096, 1024)
    # So is an unreadable entry, until it is gone.
    region.put_record("m1", allocation("m1", ("ads/web", 1, GIB), owner="ads"))
    region.put(keys.allocation_entry("m1", "ads", "web", 2), b"[1]", region.revision)
    assert not index.readable[row]
    index.set_allocation("m1/ads/web/2", None, region.revision + 1)
    assert index.readable[row]


def test_record_before_its_machine() -> None:
    region = Region()
    region.put_record("m1", allocation("m1", ("ads/web", 0, GIB), owner="ads"))
    index, row = region.index, region.row("m1")
    assert index.state[row] == ABSENT
    assert index.machines_present() == []
    assert index.records_present() == ["m1", "m1/ads/web/0"]
    region.add(machine("m1"))
    assert memory(region, "m1") == (4096, 1024)
    assert index.owned_rows(index.owners.find("ads")) == {row}
    # Owned, so not in the free pool.
    assert row not in index.pool_rows(int(index.msb[row]))


def test_an_extra_resource_a_machine_offers_adds_a_column() -> None:
    region = Region().add(machine("m1"))
    region.put_record("m1", allocation("m1", ("ads/web", 0, GIB), owner="ads"))
    index = region.index
    assert index.dimensions == ["cpu", "memory", "disk", "gpus"]
    region.add(machine("m2", extra={"fpga": 2}))
    assert index.dimensions == ["cpu", "memory", "disk", "gpus", "extra/fpga"]
    assert index.capacity.shape[1] == index.used.shape[1] == index.free.shape[1] == 5
    assert index.capacity[region.row("m2"), 4] == 2
    assert index.capacity[region.row("m1"), 4] == 0
    # Usage held before the column existed grows with it.
    assert len(index.usage_of("ads")) == 5
    region.put_record(
        "m2", allocation("m2", ("ads/web", 1, Resources(extra={"fpga": 1, "tpu": 3})))
    )
    # No machine offers tpu: an ephemeral resource of ads, counted apart and sparsely (a
    # column per label would make one per gang).
    assert index.dimensions[-1] == "extra/fpga"
    assert index.used[region.row("m2"), 4:].tolist() == [1]
    assert index.free[region.row("m2"), 4:].tolist() == [1]
    assert usage(region, "ads") == {"memory": 1024, "extra/fpga": 1}
    assert index.extra_held("ads", "tpu") == {region.row("m2"): 3}
    assert index.extra_held("ads", "fpga") == {region.row("m2"): 1}
    assert index.extra_held("other", "tpu") == {}
    assert index.vector(Resources(gpus=1, extra={"asic": 1})).tolist() == [0, 0, 0, 1, 0]
    region.put_record("m2", allocation("m2"))
    assert index.extra_held("ads", "tpu") == {}


def test_index_grows_past_its_initial_rows() -> None:
    region = Region()
    region.add(
        *(machine(f"m{n}", msb=f"msb{n % 3}", attributes={"n": str(n)}) for n in range(2100))
    )
    index = region.index
    assert index.rows == 2100
    assert len(index.state) >= 2100
    last = region.row("m2099")
    assert index.state[last] == UP
    assert int(index.capacity[last, index.dimension_of["memory"]]) == 4096
    assert index.numbers("n")[last] == 2099
    assert int(np.count_nonzero(index.state[: index.rows] == UP)) == 2100


def test_numbers_of_an_attribute() -> None:
    region = Region().add(
        machine("a", attributes={"cores": "16"}),
        machine("b", attributes={"cores": "many"}),
        machine("c"),
    )
    numbers = region.index.numbers("cores")
    assert numbers[region.row("a")] == 16
    assert np.isnan(numbers[[region.row("b"), region.row("c")]]).all()
    assert np.isnan(region.index.numbers("never-seen")[: region.index.rows]).all()


def test_entitlements_come_and_go() -> None:
    index = AllocationIndex()
    ads = entitlement(machines={"std": 2})
    index.set_entitlement("ads", to_json(ads))
    assert index.entitlement("ads") == ads
    assert index.owners.find("ads") != NONE
    index.set_entitlement("ads", b"{}")
    assert index.entitlement_names() == []
    index.set_entitlement("ads", to_json(ads))
    index.set_entitlement("ads", None)
    assert index.entitlement_names() == []


def test_a_listing_holds_every_entry_older_than_its_machine_record() -> None:
    # The record was written again after the entry (another task came and went): a fresh
    # replica's listing still holds the entry, which exists in the snapshot.
    region = Region().add(machine("m1"))
    index = region.index
    header = to_json(allocation("m1", owner="ads").header)
    index.set_allocations(
        [
            KeyValue(keys.allocation("m1"), header, 1, 9, 4),
            KeyValue(keys.allocation_entry("m1", "ads", "web", 0), to_json(GIB), 5, 5, 1),
        ]
    )
    assert index.placements("ads/web") == {0: "m1"}
    assert memory(region, "m1") == (4096, 1024)
    assert usage(region, "ads") == {"memory": 1024}
