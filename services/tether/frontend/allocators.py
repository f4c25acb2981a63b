"""Calls to the allocator replicas registered under `allocators/`, trying the next on failure."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from types import MappingProxyType
from typing import Final, TypeVar

import grpc

from tether.frontend import records
from tether.frontend.problems import BadRequest, Conflict, NotFound, Problem
from tether.model import AllocatorEndpoint
from tether.proto.allocator.v1 import allocator_pb2, allocator_pb2_grpc
from tether.store import Store, keys

log = logging.getLogger(__name__)

Response = TypeVar("Response")

FAILOVER_CODES: Final = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
"""Codes after which another replica may well answer; any other is the allocator's answer."""


class AllocatorUnavailable(Exception):
    """No allocator replica is registered, or none of them answered."""


class AllocatorRefused(Exception):
    """An allocator answered the request with an error status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class AllocatorFailed(Problem):
    status = HTTPStatus.BAD_GATEWAY
    type = "allocator-error"
    title = "Unexpected answer from an allocator"


REFUSALS: Final[Mapping[grpc.StatusCode, type[Problem]]] = MappingProxyType(
    {
        grpc.StatusCode.NOT_FOUND: NotFound,
        grpc.StatusCode.INVALID_ARGUMENT: BadRequest,
        grpc.StatusCode.FAILED_PRECONDITION: Conflict,
    }
)
"""The problem each allocator status answers with; any other status is a 502."""


def refusal_problem(error: AllocatorRefused) -> Problem:
    """What a route answers when an allocator refused its request."""
    problem = REFUSALS.get(error.code)
    if problem is None:
        return AllocatorFailed(f"the allocator failed ({error.code.name}): {error.message}")
    return problem(error.message)


class Allocators:
    """Calls any live allocator replica: the registered ones in id order, the next one after
    UNAVAILABLE or a timeout. One channel per address, reused across requests."""

    def __init__(self, store: Store, timeout_s: float) -> None:
        self._store = store
        self._timeout_s = timeout_s
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def explain(self, job_handle: str) -> allocator_pb2.ExplainResponse:
        """Allocator.Explain for the job `<entitlement>/<job>`."""
        request = allocator_pb2.ExplainRequest(job_handle=job_handle)
        return await self._call(
            "Explain", lambda stub: stub.Explain(request, timeout=self._timeout_s)
        )

    async def ephemeral_state(
        self, request: allocator_pb2.EphemeralStateRequest
    ) -> allocator_pb2.EphemeralStateResponse:
        """Allocator.EphemeralState."""
        return await self._call(
            "EphemeralState", lambda stub: stub.EphemeralState(request, timeout=self._timeout_s)
        )

    async def _call(
        self,
        method: str,
        call: Callable[[allocator_pb2_grpc.AllocatorAsyncStub], Awaitable[Response]],
    ) -> Response:
        """`call` on the registered replicas in id order until one answers."""
        endpoints = await records.scan(self._store, keys.ALLOCATORS, AllocatorEndpoint)
        if not endpoints:
            raise AllocatorUnavailable(f"no allocator is registered under {keys.ALLOCATORS}")
        await self._forget_channels_except({endpoint.address for endpoint in endpoints})
        failures = []
        for endpoint in endpoints:
            stub = allocator_pb2_grpc.AllocatorStub(self._channel(endpoint.address))
            try:
                return await call(stub)
            except grpc.aio.AioRpcError as error:
                if error.code() not in FAILOVER_CODES:
                    raise AllocatorRefused(error.code(), error.details() or "") from None
                log.info("allocator %s: %s failed: %s", endpoint.id, method, error.details())
                failures.append(f"{endpoint.id}: {error.code().name} {error.details()}")
        raise AllocatorUnavailable(f"no allocator answered: {'; '.join(failures)}")

    async def close(self) -> None:
        """Close every channel."""
        await self._forget_channels_except(set())

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address)
        return channel

    async def _forget_channels_except(self, addresses: set[str]) -> None:
        # Replicas that left (or came back on another port) must not leave channels behind.
        for address in self._channels.keys() - addresses:
            await self._channels.pop(address).close(None)
