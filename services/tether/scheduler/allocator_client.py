"""A typed client of the allocator replicas registered under `allocators/`, with failover."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import grpc
from pydantic import ValidationError

from tether.config import TlsSettings
from tether.model import AllocatorEndpoint, from_json, parse_job_handle
from tether.proto.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from tether.store import Store, keys
from tether.store.mirror import PrefixMirror
from tether.tls import grpc_channel

_log = logging.getLogger(__name__)

T = TypeVar("T")

# Codes after which another replica may well succeed; anything else is the request's fault.
_FAILOVER_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class AllocatorError(Exception):
    """An allocator refused a request; the message says why."""


class AllocatorUnavailable(AllocatorError):
    """No live allocator replica answered; retry later."""


class StaleGeneration(AllocatorError):
    """FAILED_PRECONDITION: the store holds another generation of the job than the request."""


class JobNotFound(AllocatorError):
    """NOT_FOUND: the allocator does not know the job."""


@dataclass(frozen=True, slots=True)
class PlaceResult:
    """Where tasks were placed (index -> machine) and why the others were not (index -> reason)."""

    placements: dict[int, str]
    unplaced: dict[int, str]


@dataclass(frozen=True, slots=True)
class PreemptionFit:
    """Whether a preemption lets the preempting tasks be placed, with which of its candidates
    stopped (positions), or why not."""

    fits: bool
    chosen: tuple[int, ...]
    reason: str


Stopping = Sequence[tuple[str, int, int]]
"""(job handle, first task index stopped, tier) per candidate of a preemption."""


class Allocator(Protocol):
    """What the scheduler needs from the allocator; tests substitute their own."""

    async def place(
        self,
        job_handle: str,
        indexes: Sequence[int],
        generation: int,
        request_id: str,
        *,
        preferred: Mapping[int, str] | None = None,
    ) -> PlaceResult: ...

    async def release(
        self, job_handle: str, indexes: Sequence[int], *, return_emptied: bool = False
    ) -> int: ...


class PreemptionCheck(Protocol):
    """What the admission decider needs from the allocator."""

    async def check_preemption(
        self, job_handle: str, indexes: Sequence[int], candidates: Stopping, budget: int
    ) -> PreemptionFit: ...


def replica_order(entitlement: str, replicas: Iterable[str]) -> list[str]:
    """The replicas in the order calls for the entitlement's jobs try them (rendezvous hashing).

    Each entitlement has a home replica: its commits there never race each other on the
    entitlement's quota fence, and the replica's caches for it stay warm. A replica that comes
    or goes moves only the entitlements whose home it is or becomes.
    """
    return sorted(
        replicas,
        key=lambda replica: (zlib.crc32(f"{replica}/{entitlement}".encode()), replica),
        reverse=True,
    )


class AllocatorClient:
    """Calls the entitlement's home allocator replica, trying the next one on UNAVAILABLE or a
    timeout."""

    def __init__(self, store: Store, timeout_s: float, tls: TlsSettings) -> None:
        self._timeout_s = timeout_s
        self._tls = tls
        self._mirror = PrefixMirror(store, keys.ALLOCATORS, self._endpoints_changed)
        # Both keyed by the replica id in the registration's key.
        self._endpoints: dict[str, AllocatorEndpoint] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def start(self) -> None:
        await self._mirror.start()
        await self._endpoints_changed(set(self._mirror.items))

    async def stop(self) -> None:
        await self._mirror.stop()
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()

    async def place(
        self,
        job_handle: str,
        indexes: Sequence[int],
        generation: int,
        request_id: str,
        *,
        preferred: Mapping[int, str] | None = None,
    ) -> PlaceResult:
        request = allocator_pb2.PlaceRequest(
            job_handle=job_handle,
            task_indexes=list(indexes),
            job_generation=generation,
            request_id=request_id,
            preferred_machines=preferred or {},
        )
        response = await self._call(
            lambda stub: stub.Place(request, timeout=self._timeout_s), "Place", job_handle
        )
        return PlaceResult(
            placements={p.task_index: p.machine_id for p in response.placements},
            unplaced={u.task_index: u.reason for u in response.unplaced},
        )

    async def release(
        self, job_handle: str, indexes: Sequence[int], *, return_emptied: bool = False
    ) -> int:
        request = allocator_pb2.ReleaseRequest(
            job_handle=job_handle,
            task_indexes=list(indexes),
            return_emptied_machines=return_emptied,
        )
        response = await self._call(
            lambda stub: stub.Release(request, timeout=self._timeout_s), "Release", job_handle
        )
        return response.released

    async def check_preemption(
        self, job_handle: str, indexes: Sequence[int], candidates: Stopping, budget: int
    ) -> PreemptionFit:
        """Asks which of the candidates must stop, at most `budget` tasks in all, for the job's
        tasks `indexes` to be placed."""
        request = allocator_pb2.CheckPreemptionRequest(
            job_handle=job_handle,
            task_indexes=list(indexes),
            candidates=[
                allocator_pb2.PreemptedTasks(job_handle=handle, from_index=first, tier=tier)
                for handle, first, tier in candidates
            ],
            max_tasks=budget,
        )
        response = await self._call(
            lambda stub: stub.CheckPreemption(request, timeout=self._timeout_s),
            "CheckPreemption",
            job_handle,
        )
        return PreemptionFit(response.fits, tuple(response.chosen), response.reason)

    async def _call(
        self,
        call: Callable[[allocator_pb2_grpc.AllocatorAsyncStub], Awaitable[T]],
        method: str,
        job_handle: str,
    ) -> T:
        endpoints = dict(self._endpoints)
        if not endpoints:
            raise AllocatorUnavailable(f"no allocator is registered under {keys.ALLOCATORS}")
        failures: list[str] = []
        entitlement, _ = parse_job_handle(job_handle)
        for replica in replica_order(entitlement, endpoints):
            endpoint = endpoints[replica]
            stub = allocator_pb2_grpc.AllocatorStub(self._channel(replica, endpoint))
            try:
                return await call(stub)
            except grpc.aio.AioRpcError as error:
                code = error.code()
                if code in _FAILOVER_CODES:
                    _log.info("allocator %s: %s failed: %s", replica, method, error.details())
                    failures.append(f"{replica}: {code.name} {error.details()}")
                    continue
                raise _domain_error(method, job_handle, error) from None
        raise AllocatorUnavailable(f"{method} {job_handle}: every allocator failed: {failures}")

    def _channel(self, replica: str, endpoint: AllocatorEndpoint) -> grpc.aio.Channel:
        channel = self._channels.get(replica)
        if channel is None:
            channel = grpc_channel(endpoint.address, self._tls)
            self._channels[replica] = channel
        return channel

    async def _endpoints_changed(self, changed: set[str]) -> None:
        for key in changed:
            replica = keys.last_segment(key)
            self._endpoints.pop(replica, None)
            kv = self._mirror.items.get(key)
            if kv is not None:
                try:
                    self._endpoints[replica] = from_json(AllocatorEndpoint, kv.value, stored=True)
                except ValidationError as error:
                    _log.warning("ignoring invalid allocator record %s: %s", key, error)
            # A replica that left or re-registered (perhaps on another port) gets a fresh channel.
            channel = self._channels.pop(replica, None)
            if channel is not None:
                await channel.close(None)


def _domain_error(method: str, job_handle: str, error: grpc.aio.AioRpcError) -> AllocatorError:
    message = f"{method} {job_handle}: {error.details()}"
    match error.code():
        case grpc.StatusCode.FAILED_PRECONDITION:
            return StaleGeneration(message)
        case grpc.StatusCode.NOT_FOUND:
            return JobNotFound(message)
        case code:
            return AllocatorError(f"{message} ({code.name})")
