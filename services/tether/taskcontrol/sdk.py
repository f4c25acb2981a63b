"""Writing an application-level scheduler: subclass `Controller`, implement `decide`, `run` it.

    class Cautious(Controller):
        def decide(self, request):
            # One operation at a time, and none while a task is unhealthy.
            if request.all_unhealthy_tasks:
                return []
            return [op.id for op in request.pending_operations[:1]]

    Cautious().run("127.0.0.1:7000", "127.0.0.1:8081", token, job_handle="ads/web")

`run` serves tether.taskcontrol.v1.TaskController on the endpoint, registers it with the
region's TaskControllerRegistry, renews the registration, and unregisters on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import signal
from collections.abc import Awaitable, Iterable
from typing import Final

import grpc

from tether.aio import cancel_and_wait
from tether.config import TlsSettings
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.proto.taskcontrol.v1 import taskcontrol_pb2_grpc
from tether.tls import add_grpc_port, grpc_channel

_log = logging.getLogger(__name__)

# Deadline of one call to the registry.
_REGISTRY_TIMEOUT_S: Final = 5.0
# Pause before registering again after the registry could not be reached.
_RETRY_S: Final = 1.0


class Controller(taskcontrol_pb2_grpc.TaskControllerServicer):
    """An application-level scheduler. Subclasses implement `decide`; the base class serves it,
    answers only the newest scheduler (a call whose sequence number is not above the last one
    answered for the job acknowledges nothing), and keeps the registration alive."""

    def __init__(self) -> None:
        self._last_sequence: dict[str, int] = {}
        self._server: grpc.aio.Server | None = None
        self._channel: grpc.aio.Channel | None = None
        self._renewing: asyncio.Task[None] | None = None
        self._metadata: tuple[tuple[str, str], ...] = ()
        self.registration_id = ""
        self.address = ""
        """`host:port` the controller serves on, set by `start()`."""

    def decide(self, request: pb.TaskControlRequest) -> Iterable[str] | Awaitable[Iterable[str]]:
        """The ids of pending operations to approve now (a coroutine may return them too)."""
        raise NotImplementedError

    async def Process(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.TaskControlRequest,
        context: grpc.aio.ServicerContext[pb.TaskControlRequest, pb.TaskControlResponse],
    ) -> pb.TaskControlResponse:
        last = self._last_sequence.get(request.job_handle, 0)
        if request.sequence_number <= last:
            _log.warning(
                "%s: call %d is not newer than %d: a stale scheduler; acknowledging nothing",
                request.job_handle,
                request.sequence_number,
                last,
            )
            return pb.TaskControlResponse()
        self._last_sequence[request.job_handle] = request.sequence_number
        decided = self.decide(request)
        acks = await decided if inspect.isawaitable(decided) else decided
        pending = {operation.id for operation in request.pending_operations}
        return pb.TaskControlResponse(
            acknowledged_operation_ids=[ack for ack in dict.fromkeys(acks) if ack in pending]
        )

    async def start(
        self,
        endpoint: str,
        registry_address: str,
        token: str,
        *,
        job_handle: str = "",
        entitlement: str = "",
        ttl_s: int = 0,
        tls: TlsSettings | None = None,
    ) -> None:
        """Serves on `endpoint` (`host:port`, port 0 picks one) and registers it for one job or
        a whole entitlement; returns once registered. Raises grpc.aio.AioRpcError when the
        registry refuses (a bad token, another entitlement).

        `tls` (else TETHER_TLS_* from the environment) serves TLS with its certificate (one of
        `tether certs issue`) and trusts the region's CA when calling the registry; under
        mutual TLS only the region's schedulers may call this controller."""
        tls = tls or TlsSettings()
        host, _, port = endpoint.rpartition(":")
        self._server = grpc.aio.server()
        taskcontrol_pb2_grpc.add_TaskControllerServicer_to_server(self, self._server)
        bound = add_grpc_port(self._server, endpoint, tls)
        await self._server.start()
        self.address = f"{host}:{bound or port}"
        self._channel = grpc_channel(registry_address, tls)
        registry = taskcontrol_pb2_grpc.TaskControllerRegistryStub(self._channel)
        self._metadata = (("authorization", f"Bearer {token}"),)
        request = pb.RegisterRequest(endpoint=self.address, ttl_seconds=ttl_s)
        if job_handle:
            request.job_handle = job_handle
        else:
            request.entitlement = entitlement
        try:
            granted = await self._register(registry, request)
        except grpc.aio.AioRpcError:
            await self.stop()
            raise
        self._renewing = asyncio.create_task(
            self._keep_registered(registry, request, granted), name="taskcontroller registration"
        )

    async def stop(self) -> None:
        """Unregisters (best effort) and stops serving."""
        await cancel_and_wait(self._renewing)
        self._renewing = None
        if self._channel is not None and self.registration_id:
            registry = taskcontrol_pb2_grpc.TaskControllerRegistryStub(self._channel)
            with contextlib.suppress(grpc.aio.AioRpcError):
                await registry.Unregister(
                    pb.UnregisterRequest(registration_id=self.registration_id),
                    metadata=self._metadata,
                    timeout=_REGISTRY_TIMEOUT_S,
                )
        if self._channel is not None:
            await self._channel.close(None)
            self._channel = None
        if self._server is not None:
            await self._server.stop(1.0)
            self._server = None

    def run(
        self,
        endpoint: str,
        registry_address: str,
        token: str,
        *,
        job_handle: str = "",
        entitlement: str = "",
        ttl_s: int = 0,
        tls: TlsSettings | None = None,
    ) -> None:
        """`start`, serve until SIGINT or SIGTERM, `stop`."""

        async def main() -> None:
            stopping = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(signum, stopping.set)
            await self.start(
                endpoint,
                registry_address,
                token,
                job_handle=job_handle,
                entitlement=entitlement,
                ttl_s=ttl_s,
                tls=tls,
            )
            _log.info("serving on %s, registration %s", self.address, self.registration_id)
            try:
                await stopping.wait()
            finally:
                await self.stop()

        asyncio.run(main())

    async def _register(
        self,
        registry: taskcontrol_pb2_grpc.TaskControllerRegistryAsyncStub,
        request: pb.RegisterRequest,
    ) -> int:
        response = await registry.Register(
            request, metadata=self._metadata, timeout=_REGISTRY_TIMEOUT_S
        )
        self.registration_id = response.registration_id
        return response.ttl_seconds

    async def _keep_registered(
        self,
        registry: taskcontrol_pb2_grpc.TaskControllerRegistryAsyncStub,
        request: pb.RegisterRequest,
        ttl_s: int,
    ) -> None:
        while True:
            await asyncio.sleep(ttl_s / 3)
            try:
                await registry.Renew(
                    pb.RenewRequest(registration_id=self.registration_id),
                    metadata=self._metadata,
                    timeout=_REGISTRY_TIMEOUT_S,
                )
            except grpc.aio.AioRpcError as error:
                if error.code() is not grpc.StatusCode.NOT_FOUND:
                    _log.warning("renewing the registration failed: %s", error.details())
                    continue
                _log.warning("the registration lapsed; registering again")
                try:
                    ttl_s = await self._register(registry, request)
                except grpc.aio.AioRpcError as again:
                    _log.warning("registering again failed: %s", again.details())
                    await asyncio.sleep(_RETRY_S)
