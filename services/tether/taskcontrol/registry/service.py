"""The TaskController registry: a stateless gRPC server over the store's registrations."""

from __future__ import annotations

import logging

import grpc

from tether.proto.taskcontrol.v1 import taskcontrol_pb2_grpc
from tether.service import Service
from tether.store import Store
from tether.taskcontrol.registry.registrations import Registrations
from tether.taskcontrol.registry.servicer import RegistryServicer
from tether.taskcontrol.registry.settings import RegistrySettings
from tether.tls import add_grpc_port

_log = logging.getLogger(__name__)

# How long in-flight requests may finish when the registry stops.
_STOP_GRACE_S = 2.0


class Registry(Service):
    """Serves tether.taskcontrol.v1.TaskControllerRegistry on `address` once started. Any
    number may run: every registration is in the store, on its own lease.

    It owns `store` and closes it on `stop()`.
    """

    name = "registry"

    def __init__(self, store: Store, settings: RegistrySettings) -> None:
        self.settings = settings
        self._store = store
        self.registrations = Registrations(
            store, default_ttl_s=settings.default_ttl_s, max_ttl_s=settings.max_ttl_s
        )
        self._server: grpc.aio.Server | None = None
        self.address = ""
        """`host:port` of the gRPC server, set by `start()`."""

    async def start(self) -> None:
        self._server = grpc.aio.server()
        taskcontrol_pb2_grpc.add_TaskControllerRegistryServicer_to_server(
            RegistryServicer(self.registrations), self._server
        )
        port = add_grpc_port(
            self._server, f"{self.settings.host}:{self.settings.port}", self.settings.tls
        )
        await self._server.start()
        self.address = f"{self.settings.host}:{port}"
        _log.info("registry serving on %s", self.address)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(_STOP_GRACE_S)
            self._server = None
        await self._store.close()
