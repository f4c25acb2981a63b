"""Calls to any allocator replica registered under `allocators/`, trying the next one after
UNAVAILABLE or a timeout: for the frontend and the rebalancer, whose requests any replica
answers alike. (The scheduler's `allocator_client` sends each entitlement to its home replica.)"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import grpc
from pydantic import ValidationError

from tether.config import TlsSettings
from tether.model import AllocatorEndpoint, from_json
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.store import Store, keys
from tether.tls import grpc_channel

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


class AllocatorReplicas:
    """Calls any live allocator replica: the registered ones in id order, the next one after
    UNAVAILABLE or a timeout. One channel per address, reused across requests."""

    def __init__(self, store: Store, timeout_s: float, tls: TlsSettings) -> None:
        self._store = store
        self.timeout_s = timeout_s
        self._tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def call(
        self,
        method: str,
        call: Callable[[allocator_pb2_grpc.AllocatorAsyncStub], Awaitable[Response]],
    ) -> Response:
        """`call` on the registered replicas in id order until one answers; `method` names it
        in errors and logs."""
        result = await self._store.range(keys.ALLOCATORS)
        endpoints = []
        for kv in result.kvs:
            try:
                endpoints.append(from_json(AllocatorEndpoint, kv.value, stored=True))
            except ValidationError as error:
                log.warning("skipping %s: not a valid AllocatorEndpoint: %s", kv.key, error)
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
        raise AllocatorUnavailable(f"no allocator answered {method}: {'; '.join(failures)}")

    async def close(self) -> None:
        """Close every channel."""
        await self._forget_channels_except(set())

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc_channel(address, self._tls)
        return channel

    async def _forget_channels_except(self, addresses: set[str]) -> None:
        # Replicas that left (or came back on another port) must not leave channels behind.
        for address in self._channels.keys() - addresses:
            await self._channels.pop(address).close(None)
