"""An allocator replica: mirrors, the gRPC server, and its registration under allocators/."""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import UTC, datetime
from typing import Protocol

import grpc

from tether.aio import Periodic
from tether.allocator.engine import Engine
from tether.allocator.errors import AllocatorError
from tether.allocator.index import AllocationIndex, sinks
from tether.allocator.index.parsync import PartitionedSync
from tether.allocator.servicer import AllocatorServicer
from tether.allocator.settings import AllocatorSettings
from tether.model import AllocatorEndpoint, to_json
from tether.proto.allocator.v1 import allocator_pb2_grpc
from tether.service import Service
from tether.store import Store, StoreError, keys
from tether.store.feed import PrefixFeed
from tether.store.mirror import PrefixMirror
from tether.store.registration import Registration
from tether.tls import add_grpc_port

_log = logging.getLogger(__name__)

# How long in-flight requests may finish when the replica stops.
_STOP_GRACE_S = 2.0


class Feed(Protocol):
    """What keeps a part of the index current: a prefix's watch, or ParSync's partitions."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def wait_for(self, revision: int) -> None: ...


class Allocator(Service):
    """One allocator replica, serving tether.allocator.v1.Allocator on `address` once started.

    It owns `store` and closes it on `stop()`.
    """

    def __init__(self, store: Store, settings: AllocatorSettings) -> None:
        self.settings = settings
        self.name = f"allocator {settings.id}"
        self._store = store
        self.index = AllocationIndex()
        feeds: dict[str, Feed] = {
            prefix: PrefixFeed(store, prefix, sink) for prefix, sink in sinks(self.index).items()
        }
        self.parsync: PartitionedSync | None = None
        if settings.sync == "parsync":
            self.parsync = feeds[keys.ALLOCATIONS] = PartitionedSync(
                store,
                self.index,
                period_s=settings.sync_period_s,
                partitions=settings.sync_partitions,
            )
        self.feeds = list(feeds.values())
        self.engine = Engine(
            self._store,
            self.index,
            max_attempts=settings.max_attempts,
            idle_return_s=settings.idle_return_s,
            writer=settings.id,
            caught_up=feeds[keys.ALLOCATIONS].wait_for,
            resources_caught_up=feeds[keys.EPHEMERAL_RESOURCES].wait_for,
            refresh=None if self.parsync is None else self.parsync.refresh,
        )
        self._replicas = PrefixMirror(store, keys.ALLOCATORS, self._replicas_changed)
        self._tidying = Periodic(
            f"{self.name} idle machines and duplicates", settings.idle_check_s, self._tidy
        )
        self._server: grpc.aio.Server | None = None
        self._registration = Registration(
            store, keys.allocator(settings.id), self._endpoint, settings.lease_ttl_s, self.name
        )
        self.address = ""
        """`host:port` of the gRPC server, set by `start()`."""

    async def start(self) -> None:
        started = time.monotonic()
        for feed in self.feeds:
            await feed.start()
        _log.info(
            "%s indexed %d machines in %.1f s",
            self.name,
            len(self.index.live_rows()),
            time.monotonic() - started,
        )
        if self.parsync is not None:
            _log.info(
                "%s reads allocations/ in %d partitions, one every %.2f s (parsync)",
                self.name,
                self.parsync.partitions,
                self.parsync.period_s / self.parsync.partitions,
            )
        self._server = grpc.aio.server()
        allocator_pb2_grpc.add_AllocatorServicer_to_server(
            AllocatorServicer(self.engine), self._server
        )
        port = add_grpc_port(
            self._server, f"{self.settings.host}:{self.settings.port}", self.settings.tls
        )
        await self._server.start()
        host = self.settings.host
        # Bound to every interface, it is registered under this machine's name: other hosts
        # cannot call 0.0.0.0.
        advertised = socket.gethostname() if host in ("0.0.0.0", "::") else host
        self.address = f"{advertised}:{port}"
        await self._registration.start()
        await self._replicas.start()
        await self._replicas_changed(set())
        self._tidying.start()
        _log.info("%s serving on %s", self.name, self.address)

    async def stop(self) -> None:
        await self._tidying.stop()
        await self._replicas.stop()
        await self._registration.stop()
        if self._server is not None:
            await self._server.stop(_STOP_GRACE_S)
            self._server = None
        await self.engine.close()
        for feed in reversed(self.feeds):
            await feed.stop()
        await self._store.close()

    async def _replicas_changed(self, _: set[str]) -> None:
        self.engine.cache.set_replicas(keys.last_segment(key) for key in self._replicas.items)

    def _endpoint(self) -> bytes:
        endpoint = AllocatorEndpoint(
            id=self.settings.id, address=self.address, pid=os.getpid(), since=datetime.now(UTC)
        )
        return to_json(endpoint)

    async def _tidy(self) -> None:
        """Returns idle machines to the free pool, releases the extra entries of tasks placed
        twice and the entries no task claims, and deletes expired ephemeral resources (every
        `idle_check_s`)."""
        try:
            returned = await self.engine.return_idle(time.time())
            tidied = await self.engine.release_duplicates()
            unclaimed = await self.engine.release_unclaimed()
            expired = await self.engine.delete_expired(datetime.now(UTC))
        except (StoreError, AllocatorError) as error:
            _log.warning("%s could not tidy its machines: %s", self.name, error)
            return
        if returned:
            _log.info("%s returned %d idle machines to the free pool", self.name, returned)
        if tidied:
            _log.info("%s released %d tasks' second placements", self.name, tidied)
        if unclaimed:
            _log.info("%s released %d tasks' entries that no task claims", self.name, unclaimed)
        if expired:
            _log.info("%s deleted %d expired ephemeral resources", self.name, expired)
