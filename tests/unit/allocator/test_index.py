"""The index: records only move forward, and usage, placements and free space follow them."""

from __future__ import annotations

from tests.support.allocator_builders import entitlement, machine
from tether.allocator.index import AllocationIndex
from tether.model import Allocation, AllocationEntry, Resources, to_json
from tether.store import KeyValue


def kv(key: str, value: bytes, revision: int) -> KeyValue:
    return KeyValue(key, value, create_revision=1, mod_revision=revision, version=1)


def allocation(machine_id: str, *tasks: tuple[str, int, int]) -> Allocation:
    entries = [
        AllocationEntry(job=job, index=index, resources=Resources(memory_mib=memory))
        for job, index, memory in tasks
    ]
    return Allocation(machine=machine_id, tasks={entry.task_id: entry for entry in entries})


def indexed(*machine_ids: str) -> AllocationIndex:
    index = AllocationIndex()
    for machine_id in machine_ids:
        index.set_machine(machine_id, kv(f"m/{machine_id}", to_json(machine(machine_id)), 1))
    return index


def free_memory(index: AllocationIndex) -> dict[str, int]:
    return {c.id: c.free.memory_mib for c in index.candidates()}


def test_allocations_drive_usage_placements_and_free_space() -> None:
    index = indexed("m1", "m2")
    index.set_allocation("m1", kv("a/m1", to_json(allocation("m1", ("ads/web", 0, 1024))), 5), 5)
    index.set_allocation(
        "m2", kv("a/m2", to_json(allocation("m2", ("ads/web", 1, 512), ("ml/x", 0, 256))), 6), 6
    )
    assert index.placements("ads/web") == {0: "m1", 1: "m2"}
    assert index.usage("ads") == Resources(memory_mib=1536)
    assert index.usage("ml") == Resources(memory_mib=256)
    assert free_memory(index) == {"m1": 3072, "m2": 3328}
    assert index.record("m1").revision == 5

    # Task 0 moves away from m1: only the changed record is re-read.
    index.set_allocation("m1", kv("a/m1", to_json(allocation("m1")), 7), 7)
    assert index.placements("ads/web") == {1: "m2"}
    assert index.usage("ads") == Resources(memory_mib=512)
    assert free_memory(index)["m1"] == 4096


def test_older_values_are_ignored() -> None:
    index = indexed("m1")
    index.record_commit({"m1": allocation("m1", ("ads/web", 0, 1024))}, 10)
    # The watch delivers an older value after the allocator's own commit.
    index.set_allocation("m1", kv("a/m1", to_json(allocation("m1")), 8), 8)
    assert index.record("m1").revision == 10
    assert index.placements("ads/web") == {0: "m1"}
    # A deletion seen before the commit is older too; one seen after it applies.
    index.set_allocation("m1", None, 9)
    assert index.record("m1").revision == 10
    index.set_allocation("m1", None, 11)
    assert index.record("m1").revision == 0
    assert index.placements("ads/web") == {}
    assert index.usage("ads").is_zero()


def test_missing_record_is_empty_at_revision_zero() -> None:
    index = indexed("m1")
    record = index.record("m1")
    assert record.revision == 0
    assert record.allocation == Allocation(machine="m1")
    assert free_memory(index) == {"m1": 4096}


def test_unreadable_or_overfull_records_leave_no_free_space() -> None:
    index = indexed("m1", "m2")
    index.set_allocation("m1", kv("a/m1", b"{not json", 3), 3)
    index.set_allocation("m2", kv("a/m2", to_json(allocation("m2", ("ads/web", 0, 5000))), 4), 4)
    assert index.record("m1").allocation is None
    assert free_memory(index) == {"m1": 0, "m2": 0}


def test_machines_and_entitlements_come_and_go() -> None:
    index = indexed("m1", "m2")
    index.set_machine("m2", None)
    assert [c.id for c in index.candidates()] == ["m1"]
    index.set_machine("m1", kv("m/m1", b"garbage", 2))
    assert list(index.candidates()) == []

    index.set_entitlement("ads", kv("e/ads", to_json(entitlement()), 3))
    assert index.entitlement("ads") == entitlement()
    index.set_entitlement("ads", None)
    assert index.entitlement("ads") is None


def test_tasks_without_resources_come_and_go() -> None:
    index = indexed("m1")
    index.set_allocation(
        "m1", kv("a/m1", to_json(allocation("m1", ("ads/web", 0, 0), ("ads/web", 1, 0))), 2), 2
    )
    assert index.placements("ads/web") == {0: "m1", 1: "m1"}
    # Both leave at once: the entitlement's usage is already zero when the second one goes.
    index.set_allocation("m1", kv("a/m1", to_json(allocation("m1")), 3), 3)
    assert index.placements("ads/web") == {}
    assert index.usage("ads").is_zero()
