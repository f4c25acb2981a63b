"""An allocator replica: mirrors, the gRPC server, and its registration under allocators/."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from datetime import UTC, datetime

import grpc

from tether.allocator.engine import Engine
from tether.allocator.index import AllocationIndex
from tether.allocator.servicer import AllocatorServicer
from tether.allocator.settings import AllocatorSettings
from tether.model import AllocatorEndpoint, to_json
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.service import Service
from tether.store import Store, StoreError, keys
from tether.store.lease import LeaseKeeper
from tether.store.mirror import PrefixMirror

_log = logging.getLogger(__name__)

# How long in-flight requests may finish when the replica stops.
_STOP_GRACE_S = 2.0
# Pause between attempts to register again after the lease was lost.
_REGISTER_RETRY_S = 1.0


class Allocator(Service):
    """One allocator replica, serving tether.allocator.v1.Allocator on `address` once started.

    The caller owns `store` and closes it after `stop()`.
    """

    def __init__(self, store: Store, settings: AllocatorSettings) -> None:
        self.settings = settings
        self.name = f"allocator {settings.id}"
        self._store = store
        self.index = AllocationIndex()
        self._entitlements = PrefixMirror(
            self._store, keys.ENTITLEMENTS, self._entitlements_changed
        )
        self._machines = PrefixMirror(self._store, keys.MACHINES, self._machines_changed)
        self._allocations = PrefixMirror(self._store, keys.ALLOCATIONS, self._allocations_changed)
        self._engine = Engine(self._store, self.index, settings.max_attempts)
        self._server: grpc.aio.Server | None = None
        self._lease = LeaseKeeper(self._store, settings.lease_ttl_s)
        self._registration: asyncio.Task[None] | None = None
        self.address = ""
        """`host:port` of the gRPC server, set by `start()`."""

    async def start(self) -> None:
        for mirror, changed in (
            (self._entitlements, self._entitlements_changed),
            (self._machines, self._machines_changed),
            (self._allocations, self._allocations_changed),
        ):
            await mirror.start()
            # A mirror reports changes after its first listing only; that listing goes in here.
            await changed(set(mirror.items))
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
        for mirror in (self._allocations, self._machines, self._entitlements):
            await mirror.stop()

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

    async def _entitlements_changed(self, changed: set[str]) -> None:
        for key in changed:
            self.index.set_entitlement(keys.last_segment(key), self._entitlements.items.get(key))

    async def _machines_changed(self, changed: set[str]) -> None:
        for key in changed:
            self.index.set_machine(keys.last_segment(key), self._machines.items.get(key))

    async def _allocations_changed(self, changed: set[str]) -> None:
        revision = self._allocations.revision
        for key in changed:
            self.index.set_allocation(
                keys.last_segment(key), self._allocations.items.get(key), revision
            )
