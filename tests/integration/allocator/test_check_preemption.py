"""CheckPreemption on a replica over real gRPC: which of some tasks must stop for a job's tasks
to find machines, within a budget, and its errors; it writes nothing."""

from __future__ import annotations

import grpc
import pytest

from tests.support.allocations import read_allocations
from tests.support.allocator_builders import job, put_job
from tether.proto.allocator.v1 import allocator_pb2 as pb
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import Store


def stopping(*tasks: tuple[str, int]) -> list[pb.PreemptedTasks]:
    return [
        pb.PreemptedTasks(job_handle=handle, from_index=first, tier=0) for handle, first in tasks
    ]


async def web_on_three_machines(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    """ads/web's 3 tasks (1 GiB) on three of the four 4 GiB machines; ads/big (two tasks of a
    whole machine) stored."""
    placed = await client.Place(
        pb.PlaceRequest(job_handle="ads/web", task_indexes=[0, 1, 2], job_generation=1)
    )
    assert len(placed.placements) == 3
    await put_job(region, job("big", count=2, memory=4096, cpu=100))


async def test_a_preemption_that_empties_a_machine_lets_the_job_fit(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    await web_on_three_machines(region, client)
    before = await read_allocations(region)

    alone = await client.CheckPreemption(
        pb.CheckPreemptionRequest(job_handle="ads/big", task_indexes=[0, 1])
    )
    assert not alone.fits
    assert "memory" in alone.reason

    # Each of web's tasks is alone on its machine: stopping any one empties it; the cheapest
    # is one task, and of those the first offered.
    one = await client.CheckPreemption(
        pb.CheckPreemptionRequest(
            job_handle="ads/big",
            task_indexes=[0, 1],
            candidates=stopping(("ads/web", 2), ("ads/web", 1), ("ads/web", 0)),
            max_tasks=3,
        )
    )
    assert (one.fits, list(one.chosen)) == (True, [0])

    # Within no task at all, nothing the candidates free helps.
    none = await client.CheckPreemption(
        pb.CheckPreemptionRequest(
            job_handle="ads/big",
            task_indexes=[0, 1],
            candidates=stopping(("ads/web", 2)),
            max_tasks=0,
        )
    )
    assert not none.fits
    assert "at most 0 tasks" in none.reason
    # Read-only: nothing placed, nothing released.
    assert await read_allocations(region) == before


async def test_errors_name_what_is_wrong(
    region: Store, client: allocator_pb2_grpc.AllocatorAsyncStub
) -> None:
    async def code_of(request: pb.CheckPreemptionRequest) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.aio.AioRpcError) as failure:
            await client.CheckPreemption(request)
        return failure.value.code(), failure.value.details() or ""

    code, message = await code_of(pb.CheckPreemptionRequest(job_handle="ads/nope"))
    assert (code, message) == (grpc.StatusCode.NOT_FOUND, "job ads/nope not found")
    code, message = await code_of(pb.CheckPreemptionRequest(job_handle="nope", task_indexes=[0]))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "invalid job handle" in message
    code, message = await code_of(pb.CheckPreemptionRequest(job_handle="ads/web", task_indexes=[3]))
    assert (code, message) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "task indexes 3 are out of range: job ads/web has 3 tasks (0 to 2)",
    )
    code, message = await code_of(
        pb.CheckPreemptionRequest(
            job_handle="ads/web", task_indexes=[0], candidates=stopping(("no handle", 0))
        )
    )
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert "invalid job handle" in message
