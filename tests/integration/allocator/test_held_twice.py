"""A task held on two machines: two allocators placed it (a Place committed whose answer was
lost, sent again to the other allocator before it saw the commit). A release removes both
entries; while the task lives, the allocator removes the one its task record does not name."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.support.allocations import Stored, put_allocation, read_allocations
from tests.support.waiting import eventually
from tether.allocator.service import Allocator
from tether.model import Allocation, Resources, Task, TaskState, to_json
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import Store, keys

GIB = Resources(memory_mib=1024)


async def put_twice(region: Store, task_id: str) -> None:
    """Writes the task's entry on m0 and on m1, as two allocators would."""
    for machine_id in ("m0", "m1"):
        await put_allocation(
            region, Allocation(machine=machine_id, entitlement="ads"), {task_id: GIB}
        )


async def hold_twice(region: Store, allocator: Allocator, task_id: str) -> None:
    """`put_twice`, then waits until the replica's index holds both entries."""
    await put_twice(region, task_id)
    job, _, index = task_id.rpartition("/")

    async def rows() -> int:
        return len(allocator.index.held_twice().get((job, int(index)), []))

    await eventually(rows, lambda count: count == 2, timeout_s=10, what=f"{task_id} held twice")


async def put_task(region: Store, index: int, machine_id: str) -> None:
    """The record of task ads/web/<index>, running on `machine_id`, as the scheduler writes it."""
    task = Task(
        job="ads/web",
        index=index,
        generation=1,
        attempt=1,
        machine=machine_id,
        state=TaskState.RUNNING,
        version="1",
        updated_at=datetime.now(UTC),
    )
    await region.put(keys.task("ads", "web", index), to_json(task))


async def entries_become(region: Store, wanted: dict[str, list[str]], what: str) -> None:
    """Waits until the store's allocation entries are `wanted` (machine -> task ids)."""

    async def stored() -> dict[str, list[str]]:
        return entries(await read_allocations(region))

    await eventually(stored, lambda now: now == wanted, timeout_s=10, what=what)


def entries(stored: dict[str, Stored]) -> dict[str, list[str]]:
    """Machine -> the task ids it holds, of the machines that hold any."""
    return {machine_id: sorted(a.tasks) for machine_id, a in stored.items() if a.tasks}


async def test_a_release_removes_both_entries(
    region: Store, allocator: Allocator, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    await hold_twice(region, allocator, "ads/web/0")
    released = await client.Release(pb.ReleaseRequest(job_handle="ads/web", task_indexes=[0]))
    assert released.released == 1
    assert entries(await read_allocations(region)) == {}
    assert allocator.index.held_twice() == {}
    memory = allocator.index.dimension_of["memory"]
    assert int(allocator.index.usage_of("ads")[memory]) == 0


async def test_the_entry_its_task_record_does_not_name_is_released(
    region: Store, allocator: Allocator
) -> None:
    # Held twice first: with the record already there, the replica could tidy the second entry
    # before the test saw both.
    await hold_twice(region, allocator, "ads/web/1")
    await put_task(region, 1, "m1")

    await entries_become(region, {"m1": ["ads/web/1"]}, "the entry on m0 to be released")
    memory = allocator.index.dimension_of["memory"]

    def held() -> tuple[dict[int, str], int]:
        return allocator.index.placements("ads/web"), int(allocator.index.usage_of("ads")[memory])

    # The store shows the release a moment before the replica's commit returns and updates
    # its index, so the index is waited for too.
    await eventually(held, lambda now: now == ({1: "m1"}, 1024), timeout_s=10, what="the index")


async def test_a_task_without_a_machine_keeps_both_until_it_has_one(
    region: Store, allocator: Allocator
) -> None:
    # No task record yet (the scheduler has not written the placement): nothing is decided.
    await hold_twice(region, allocator, "ads/web/2")
    # The barrier: a task held twice whose record names m0 is tidied in the same pass. Not
    # waited for held twice: with its record there, a pass may tidy it before a test sees both.
    await put_task(region, 0, "m0")
    await put_twice(region, "ads/web/0")

    await entries_become(
        region,
        {"m0": ["ads/web/0", "ads/web/2"], "m1": ["ads/web/2"]},
        "only task 0's second entry to be released",
    )
