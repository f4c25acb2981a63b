"""Suggest (where tasks would go if placed anew, read-only) and Place's preferred machines (a
move's target), on a replica in-process over real gRPC on a real store."""

from __future__ import annotations

import grpc
import pytest

from tests.integration.allocator.test_allocator import machines_of
from tests.support.allocator_builders import entitlement, job, put_job
from tests.support.waiting import eventually
from tether.model import Resources, to_json
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import Store, keys

MACHINES = {"m0", "m1", "m2", "m3"}


async def fill(store: Store, machine_id: str, memory_mib: int) -> None:
    """Another job's task taking `memory_mib` of the machine (its header stays as it is)."""
    entry = keys.allocation_entry(machine_id, "ml", "filler", 0)
    await store.put(entry, to_json(Resources(memory_mib=memory_mib)))


async def test_suggest_answers_where_a_task_would_go_and_writes_nothing(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    placed = machines_of(
        await client.Place(
            pb.PlaceRequest(job_handle="ads/web", task_indexes=[0, 1, 2], job_generation=1)
        )
    )
    (spare,) = MACHINES - set(placed.values())
    request = pb.SuggestRequest(job_handle="ads/web", task_indexes=[0])
    # Its own machine has room for it still, and the entitlement's machines go first.
    assert machines_of(await client.Suggest(request)) == {0: placed[0]}

    # Another job fills task 0's machine: one more task would go to the machine of the MSB
    # without one of the job's other tasks.
    await fill(region, placed[0], 3072)

    async def suggested() -> dict[int, str]:
        return machines_of(await client.Suggest(request))

    await eventually(suggested, lambda s: s == {0: spare}, what="a suggestion off the full machine")
    revision = await region.revision()
    both = await client.Suggest(pb.SuggestRequest(job_handle="ads/web", task_indexes=[1, 0]))
    assert [p.task_index for p in both.placements] == [1, 0]
    assert list(both.unplaced) == []
    assert await region.revision() == revision, "Suggest wrote to the store"
    stored = machines_of(
        await client.Place(
            pb.PlaceRequest(job_handle="ads/web", task_indexes=[0, 1, 2], job_generation=1)
        )
    )
    assert stored == placed, "the suggestion moved nothing"


async def test_suggest_says_why_a_task_would_go_nowhere(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    for machine_id in sorted(MACHINES):
        await fill(region, machine_id, 3584)

    async def suggest() -> pb.SuggestResponse:
        return await client.Suggest(pb.SuggestRequest(job_handle="ads/web", task_indexes=[0]))

    # A task of 1 GiB fits in no machine's 512 MiB left.
    answer = await eventually(suggest, lambda a: len(a.unplaced) == 1, what="no room anywhere")
    assert answer.unplaced[0].task_index == 0
    assert "no machine fits" in answer.unplaced[0].reason
    assert list(answer.placements) == []


@pytest.mark.parametrize(
    ("request_", "code", "says"),
    [
        (pb.SuggestRequest(job_handle="ads/nope", task_indexes=[0]), "NOT_FOUND", "ads/nope"),
        (pb.SuggestRequest(job_handle="ads/web", task_indexes=[7]), "INVALID_ARGUMENT", "7"),
        (pb.SuggestRequest(job_handle="ads/web", task_indexes=[1, 1]), "INVALID_ARGUMENT", "1"),
        (pb.SuggestRequest(job_handle="no-slash", task_indexes=[0]), "INVALID_ARGUMENT", "slash"),
    ],
)
async def test_a_bad_suggest_is_refused_with_a_reason(
    client: allocator_pb2_grpc.AllocatorAsyncStub,
    request_: pb.SuggestRequest,
    code: str,
    says: str,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await client.Suggest(request_)
    assert refused.value.code() is grpc.StatusCode[code]
    assert says in (refused.value.details() or "")


async def test_place_puts_a_task_on_its_preferred_machine_where_it_still_fits(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    # Without a preference, machines tie and the first by id wins.
    first = machines_of(
        await client.Place(
            pb.PlaceRequest(job_handle="ads/web", task_indexes=[0], job_generation=1)
        )
    )
    assert first == {0: "m0"}
    moved = await client.Place(
        pb.PlaceRequest(
            job_handle="ads/web", task_indexes=[1], job_generation=1, preferred_machines={1: "m3"}
        )
    )
    assert machines_of(moved) == {1: "m3"}


@pytest.fixture
async def full_m2(region: Store) -> None:
    """Another job's task fills m2 before the allocator starts (and reads it)."""
    await fill(region, "m2", 4096)


async def test_place_passes_over_a_preferred_machine_without_room_or_unknown(
    full_m2: None, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    answer = await client.Place(
        pb.PlaceRequest(
            job_handle="ads/web",
            task_indexes=[0, 1],
            job_generation=1,
            preferred_machines={0: "m2", 1: "m9"},
        )
    )
    placed = machines_of(answer)
    assert sorted(placed) == [0, 1]
    assert set(placed.values()) <= MACHINES - {"m2"}


async def test_suggest_counts_the_tasks_it_moves_against_the_quota_once(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    # An entitlement whose quota its job's three tasks fill: one of them may still move.
    await region.put(keys.entitlement("full"), to_json(entitlement("full", cpu=1500, memory=3072)))
    await put_job(region, job("web", entitlement="full"))
    placed = machines_of(
        await client.Place(
            pb.PlaceRequest(job_handle="full/web", task_indexes=[0, 1, 2], job_generation=1)
        )
    )
    assert sorted(placed) == [0, 1, 2]
    answer = await client.Suggest(pb.SuggestRequest(job_handle="full/web", task_indexes=[1]))
    assert list(answer.unplaced) == [], answer.unplaced[0].reason if answer.unplaced else ""
    assert machines_of(answer)[1] in MACHINES
