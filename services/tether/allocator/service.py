"""An allocator replica: mirrors, the gRPC server, and its registration under allocators/."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime

import grpc

from tether.allocator.engine import Engine
from tether.allocator.index import AllocationIndex
from tether.allocator.servicer import AllocatorServicer
from tether.allocator.settings import AllocatorSettings
from tether.model import AllocatorEndpoint, to_json
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.service import Service
from tether.store import KeyValue, Store, StoreError, keys
from tether.store.lease import LeaseKeeper
from tether.store.mirror import PrefixMirror

_log = logging.getLogger(__name__)

# How long in-flight requests may finish when the replica stops.
_STOP_GRACE_S = 2.0
# Pause between attempts to register again after the lease was lost.
_REGISTER_RETRY_S = 1.0

_Apply = Callable[[str, KeyValue | None, int], None]
"""Applies one key's current value to the index: (last key segment, value or None, revision)."""


class _Feed:
    """A prefix mirror whose every key, those of its first listing included, goes to `apply`."""

    def __init__(self, store: Store, prefix: str, apply: _Apply) -> None:
        self._mirror = PrefixMirror(store, prefix, self._changed)
        self._apply = apply

    async def start(self) -> None:
        await self._mirror.start()
        # The mirror reports changes after its first listing only.
        await self._changed(set(self._mirror.items))

    async def stop(self) -> None:
        await self._mirror.stop()

    async def _changed(self, changed: set[str]) -> None:
        for key in changed:
            self._apply(keys.last_segment(key), self._mirror.items.get(key), self._mirror.revision)


class Allocator(Service):
    """One allocator replica, serving tether.allocator.v1.Allocator on `address` once started.

    It owns `store` and closes it on `stop()`.
    """

    def __init__(self, store: Store, settings: AllocatorSettings) -> None:
        self.settings = settings
        self.name = f"allocator {settings.id}"
        self._store = store
        self.index = AllocationIndex()
        index = self.index
        self._feeds = [
            _Feed(store, keys.ENTITLEMENTS, lambda name, kv, _: index.set_entitlement(name, kv)),
            _Feed(
                store, keys.MACHINES, lambda machine_id, kv, _: index.set_machine(machine_id, kv)
            ),
            _Feed(store, keys.ALLOCATIONS, index.set_allocation),
        ]
        self._engine = Engine(self._store, self.index, settings.max_attempts)
        self._server: grpc.aio.Server | None = None
        self._lease = LeaseKeeper(self._store, settings.lease_ttl_s)
        self._registration: asyncio.Task[None] | None = None
        self.address = ""
        """`host:port` of the gRPC server, set by `start()`."""

    async def start(self) -> None:
        for feed in self._feeds:
            await feed.start()
        self._server = grpc.aio.server()
        allocator_pb2_grpc.add_AllocatorServicer_to_server(
            AllocatorServicer(self._engine), self._server
        )
        port = self._server.add_insecure_port(f"{self.settings.host}:{self.settings.port}")
        await self._server.start()
        self.address = f"{self.settings.host}:{port}"
        await self._register()
        self._registration = asyncio.create_task(
            self._keep_registered(), name=f"{self.name} registration"
        )
        _log.info("%s serving on %s", self.name, self.address)

    async def stop(self) -> None:
        if self._registration is not None:
            self._registration.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._registration
            self._registration = None
        await self._lease.stop(revoke=True)
        if self._server is not None:
            await self._server.stop(_STOP_GRACE_S)
            self._server = None
        for feed in reversed(self._feeds):
            await feed.stop()
        await self._store.close()

    async def _register(self) -> None:
        lease = await self._lease.start()
        endpoint = AllocatorEndpoint(
            id=self.settings.id, address=self.address, pid=os.getpid(), since=datetime.now(UTC)
        )
        await self._store.put(keys.allocator(self.settings.id), to_json(endpoint), lease=lease)

    async def _keep_registered(self) -> None:
        while True:
            await self._lease.lost.wait()
            _log.warning("%s lost its registration lease; registering again", self.name)
            try:
                await self._register()
            except StoreError as error:
                _log.warning("%s could not register, retrying: %s", self.name, error)
                # Sets `lost` again (the lease may have been granted before the put failed).
                await self._lease.stop(revoke=True)
                await asyncio.sleep(_REGISTER_RETRY_S)
