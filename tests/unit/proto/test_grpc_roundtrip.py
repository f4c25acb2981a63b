"""The generated TaskController service code works over real gRPC on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from tether.proto.taskcontrol.v1 import taskcontrol_pb2, taskcontrol_pb2_grpc


class RestartOnlyController(taskcontrol_pb2_grpc.TaskControllerServicer):
    """Approves RESTART operations and nothing else."""

    def __init__(self) -> None:
        self.requests: list[taskcontrol_pb2.TaskControlRequest] = []

    async def Process(  # noqa: N802 (the generated servicer's method name)
        self,
        request: taskcontrol_pb2.TaskControlRequest,
        context: grpc.aio.ServicerContext[
            taskcontrol_pb2.TaskControlRequest, taskcontrol_pb2.TaskControlResponse
        ],
    ) -> taskcontrol_pb2.TaskControlResponse:
        self.requests.append(request)
        return taskcontrol_pb2.TaskControlResponse(
            acknowledged_operation_ids=[
                op.id
                for op in request.pending_operations
                if op.kind == taskcontrol_pb2.OPERATION_KIND_RESTART
            ]
        )


@pytest.fixture
def controller() -> RestartOnlyController:
    return RestartOnlyController()


@pytest.fixture
async def port(controller: RestartOnlyController) -> AsyncIterator[int]:
    server = grpc.aio.server()
    try:
        taskcontrol_pb2_grpc.add_TaskControllerServicer_to_server(controller, server)
        bound = server.add_insecure_port("127.0.0.1:0")
        assert bound > 0
        await server.start()
        yield bound
    finally:
        await server.stop(grace=None)


async def test_process_acknowledges_only_restarts(
    port: int, controller: RestartOnlyController
) -> None:
    tc = taskcontrol_pb2
    task = tc.TaskRef(job_handle="ads/frontend", index=0, task_id="t-0", machine_id="m-0")
    request = tc.TaskControlRequest(
        job_handle="ads/frontend",
        sequence_number=1,
        task_count=1,
        pending_operations=[
            tc.TaskOperation(id="op-stop", kind=tc.OPERATION_KIND_STOP, tasks=[task]),
            tc.TaskOperation(id="op-restart", kind=tc.OPERATION_KIND_RESTART, tasks=[task]),
            tc.TaskOperation(id="op-move", kind=tc.OPERATION_KIND_MOVE, tasks=[task]),
        ],
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = taskcontrol_pb2_grpc.TaskControllerStub(channel)
        response = await stub.Process(request, timeout=10)

    assert list(response.acknowledged_operation_ids) == ["op-restart"]
    assert controller.requests == [request]
