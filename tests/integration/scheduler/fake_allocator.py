"""A minimal allocator for the scheduler's tests: real gRPC, registered in the store, no writes.

The real allocator is its own service; this one picks up machines round-robin (a move's target
first), remembers where it put each task (so Place is idempotent per task) and records every call.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import grpc

from tether.model import AllocatorEndpoint, Job, Machine, MachineState, from_json, to_json
from tether.proto.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from tether.store import Store, keys
from tether.store.lease import LeaseKeeper

Context = grpc.aio.ServicerContext[object, object]


@dataclass
class FakeAllocator(allocator_pb2_grpc.AllocatorServicer):
    store: Store
    placed: dict[tuple[str, int], str] = field(default_factory=dict)
    place_calls: list[allocator_pb2.PlaceRequest] = field(default_factory=list)
    release_calls: list[tuple[str, list[int]]] = field(default_factory=list)
    preemption_checks: list[allocator_pb2.CheckPreemptionRequest] = field(default_factory=list)
    _turn: itertools.count[int] = field(default_factory=itertools.count)

    async def Place(  # noqa: N802 (the generated servicer's method name)
        self, request: allocator_pb2.PlaceRequest, context: Context
    ) -> allocator_pb2.PlaceResponse:
        self.place_calls.append(request)
        entitlement, name = request.job_handle.split("/")
        kv = await self.store.get(keys.job(entitlement, name))
        if kv is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no job {request.job_handle}")
            raise AssertionError("abort returns only by raising")
        job = from_json(Job, kv.value, stored=True)
        if job.generation != request.job_generation:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"job is at generation {job.generation}, not {request.job_generation}",
            )
        machines = await self._up_machines()
        response = allocator_pb2.PlaceResponse(attempts=1)
        for index in request.task_indexes:
            task = (request.job_handle, index)
            preferred = request.preferred_machines.get(index)
            if task not in self.placed and preferred in machines:
                self.placed[task] = preferred
            if task not in self.placed and machines:
                self.placed[task] = machines[next(self._turn) % len(machines)]
            if task in self.placed:
                response.placements.add(task_index=index, machine_id=self.placed[task])
            else:
                response.unplaced.add(task_index=index, reason="no machine is up")
        return response

    async def Release(  # noqa: N802
        self, request: allocator_pb2.ReleaseRequest, context: Context
    ) -> allocator_pb2.ReleaseResponse:
        indexes = list(request.task_indexes)
        self.release_calls.append((request.job_handle, indexes))
        released = [
            task
            for task in list(self.placed)
            if task[0] == request.job_handle and (not indexes or task[1] in indexes)
        ]
        for task in released:
            del self.placed[task]
        return allocator_pb2.ReleaseResponse(released=len(released))

    async def CheckPreemption(  # noqa: N802
        self, request: allocator_pb2.CheckPreemptionRequest, context: Context
    ) -> allocator_pb2.CheckPreemptionResponse:
        # It places anywhere: whatever stops, the tasks fit.
        self.preemption_checks.append(request)
        return allocator_pb2.CheckPreemptionResponse(fits=True)

    async def Explain(  # noqa: N802
        self, request: allocator_pb2.ExplainRequest, context: Context
    ) -> allocator_pb2.ExplainResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the scheduler never explains")
        raise AssertionError("abort returns only by raising")

    async def EphemeralState(  # noqa: N802
        self, request: allocator_pb2.EphemeralStateRequest, context: Context
    ) -> allocator_pb2.EphemeralStateResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the scheduler never reads these")
        raise AssertionError("abort returns only by raising")

    async def Suggest(  # noqa: N802
        self, request: allocator_pb2.SuggestRequest, context: Context
    ) -> allocator_pb2.SuggestResponse:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "the scheduler never asks")
        raise AssertionError("abort returns only by raising")

    async def _up_machines(self) -> list[str]:
        result = await self.store.range(keys.MACHINES)
        machines = [from_json(Machine, kv.value, stored=True) for kv in result.kvs]
        return [machine.id for machine in machines if machine.state is MachineState.UP]


@contextlib.asynccontextmanager
async def serve_fake_allocator(
    store: Store, replica: str = "fake-0"
) -> AsyncIterator[FakeAllocator]:
    """Serves a FakeAllocator on loopback, registered as `allocators/<replica>` on a lease."""
    allocator = FakeAllocator(store)
    server = grpc.aio.server()
    keeper = LeaseKeeper(store, 5)
    try:
        allocator_pb2_grpc.add_AllocatorServicer_to_server(allocator, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        lease = await keeper.start()
        endpoint = AllocatorEndpoint(
            id=replica, address=f"127.0.0.1:{port}", pid=os.getpid(), since=datetime.now(UTC)
        )
        await store.put(keys.allocator(replica), to_json(endpoint), lease=lease)
        yield allocator
    finally:
        await keeper.stop()
        await server.stop(grace=None)
