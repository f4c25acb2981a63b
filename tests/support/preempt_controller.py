"""A TaskController that records the PREEMPT operations it is told of and approves none, so
every victim keeps running until its grace deadline: the slowest a preemption can be."""

from __future__ import annotations

import asyncio
import threading

from tests.support.harness import LocalRegion
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.taskcontrol.sdk import Controller as SdkController


class PreemptRecorder(SdkController):
    """Records every PREEMPT operation it is told of, and approves none: the grace runs out."""

    def __init__(self) -> None:
        super().__init__()
        self.preempts: dict[str, pb.TaskOperation] = {}

    def decide(self, request: pb.TaskControlRequest) -> list[str]:
        for operation in request.pending_operations:
            if operation.kind == pb.OPERATION_KIND_PREEMPT:
                self.preempts[operation.id] = operation
        return []


class Controller:
    """A `PreemptRecorder` registered for one job while the `with` block runs, serving on a loop
    in a thread of its own. The SDK renews the registration (`ttl_s`) every third of its TTL, so
    it outlasts a slow test, and unregisters it at the end."""

    def __init__(self, region: LocalRegion, handle: str, ttl_s: int = 60) -> None:
        self.recorder = PreemptRecorder()
        self._region, self._handle, self._ttl_s = region, handle, ttl_s
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopping: asyncio.Event | None = None
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._serve)

    def _serve(self) -> None:
        try:
            self._loop.run_until_complete(self._run())
        except BaseException as error:  # reported by __enter__ or __exit__
            self._failed = error

    async def _run(self) -> None:
        self._stopping = asyncio.Event()
        try:
            await self.recorder.start(
                "127.0.0.1:0",
                self._region.registry_address,
                self._region.token,
                job_handle=self._handle,
                ttl_s=self._ttl_s,
            )
            self._ready.set()
            await self._stopping.wait()
        finally:
            await self.recorder.stop()

    def __enter__(self) -> PreemptRecorder:
        self._thread.start()
        assert self._ready.wait(30), f"the controller did not register: {self._failed!r}"
        return self.recorder

    def __exit__(self, *_: object) -> None:
        assert self._stopping is not None
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)
        self._loop.close()
        if self._failed is not None:
            raise AssertionError("the controller failed") from self._failed
