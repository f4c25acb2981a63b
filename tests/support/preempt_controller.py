"""A TaskController that records the PREEMPT operations it is told of and approves none, so
every victim keeps running until its grace deadline: the slowest a preemption can be."""

from __future__ import annotations

import asyncio
import threading

import grpc

from tests.support.harness import LocalRegion
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.proto.taskcontrol.v1 import taskcontrol_pb2_grpc


class PreemptRecorder(taskcontrol_pb2_grpc.TaskControllerServicer):
    """Records every PREEMPT operation it is told of, and approves none: the grace runs out."""

    def __init__(self) -> None:
        self.preempts: dict[str, pb.TaskOperation] = {}

    async def Process(  # noqa: N802 (the generated servicer's method name)
        self,
        request: pb.TaskControlRequest,
        context: grpc.aio.ServicerContext[pb.TaskControlRequest, pb.TaskControlResponse],
    ) -> pb.TaskControlResponse:
        for operation in request.pending_operations:
            if operation.kind == pb.OPERATION_KIND_PREEMPT:
                self.preempts[operation.id] = operation
        return pb.TaskControlResponse()


class Controller:
    """A `PreemptRecorder` registered for one job for `ttl_s`, serving on a loop in a thread of
    its own while the `with` block runs."""

    def __init__(self, region: LocalRegion, handle: str, ttl_s: int = 60) -> None:
        self.recorder = PreemptRecorder()
        self._region, self._handle, self._ttl_s = region, handle, ttl_s
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._run(),))

    async def _run(self) -> None:
        self._stopping = asyncio.Event()
        server = grpc.aio.server()
        taskcontrol_pb2_grpc.add_TaskControllerServicer_to_server(self.recorder, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        async with grpc.aio.insecure_channel(self._region.registry_address) as channel:
            registry = taskcontrol_pb2_grpc.TaskControllerRegistryStub(channel)
            await registry.Register(
                pb.RegisterRequest(
                    job_handle=self._handle,
                    endpoint=f"127.0.0.1:{port}",
                    ttl_seconds=self._ttl_s,
                ),
                metadata=(("authorization", f"Bearer {self._region.token}"),),
            )
            self._ready.set()
            await self._stopping.wait()
        await server.stop(0)

    def __enter__(self) -> PreemptRecorder:
        self._thread.start()
        assert self._ready.wait(30), "the controller did not register"
        return self.recorder

    def __exit__(self, *_: object) -> None:
        assert self._stopping is not None
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)
