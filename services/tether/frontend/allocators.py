"""The frontend's calls to the allocator replicas, and the problem each refusal answers with."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from types import MappingProxyType
from typing import Final

import grpc

from tether.allocator_calls import AllocatorRefused, AllocatorReplicas
from tether.config import TlsSettings
from tether.frontend.problems import BadRequest, Conflict, NotFound, Problem
from tether.proto.allocator.v1 import allocator_pb2
from tether.store import Store


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
    """The frontend's calls to the allocator replicas (`AllocatorReplicas`)."""

    def __init__(self, store: Store, timeout_s: float, tls: TlsSettings) -> None:
        self._replicas = AllocatorReplicas(store, timeout_s, tls)

    async def explain(self, job_handle: str) -> allocator_pb2.ExplainResponse:
        """Allocator.Explain for the job `<entitlement>/<job>`."""
        request = allocator_pb2.ExplainRequest(job_handle=job_handle)
        timeout_s = self._replicas.timeout_s
        return await self._replicas.call(
            "Explain", lambda stub: stub.Explain(request, timeout=timeout_s)
        )

    async def ephemeral_state(
        self, request: allocator_pb2.EphemeralStateRequest
    ) -> allocator_pb2.EphemeralStateResponse:
        """Allocator.EphemeralState."""
        timeout_s = self._replicas.timeout_s
        return await self._replicas.call(
            "EphemeralState", lambda stub: stub.EphemeralState(request, timeout=timeout_s)
        )

    async def close(self) -> None:
        """Close every channel."""
        await self._replicas.close()
