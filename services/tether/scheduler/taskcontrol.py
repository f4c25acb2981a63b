"""Approving task operations: the job's TaskController over gRPC, or the built-in rule."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from tether.config import TlsSettings
from tether.model import (
    AdvanceNotice,
    ControllerRegistration,
    MaintenanceKind,
    OperationKind,
    OperationState,
    TaskOperation,
    TaskState,
    current_status,
)
from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.proto.taskcontrol.v1 import taskcontrol_pb2_grpc
from tether.scheduler.plan import JobView, Stored, is_healthy
from tether.tls import grpc_channel

_log = logging.getLogger(__name__)

_KINDS: Mapping[OperationKind, pb.OperationKind.ValueType] = {
    OperationKind.START: pb.OPERATION_KIND_START,
    OperationKind.STOP: pb.OPERATION_KIND_STOP,
    OperationKind.RESTART: pb.OPERATION_KIND_RESTART,
    OperationKind.MOVE: pb.OPERATION_KIND_MOVE,
    OperationKind.UPDATE: pb.OPERATION_KIND_UPDATE,
    OperationKind.PREEMPT: pb.OPERATION_KIND_PREEMPT,
}
_STATES: Mapping[OperationState, pb.OperationState.ValueType] = {
    OperationState.PENDING_APPROVAL: pb.OPERATION_STATE_PENDING_APPROVAL,
    OperationState.APPROVED: pb.OPERATION_STATE_APPROVED,
    OperationState.DONE: pb.OPERATION_STATE_DONE,
    OperationState.CANCELLED: pb.OPERATION_STATE_CANCELLED,
}
_TASK_STATES: Mapping[TaskState, pb.TaskState.ValueType] = {
    TaskState.PENDING: pb.TASK_STATE_PENDING,
    TaskState.PLACED: pb.TASK_STATE_PLACED,
    TaskState.STARTING: pb.TASK_STATE_STARTING,
    TaskState.RUNNING: pb.TASK_STATE_RUNNING,
    TaskState.EXITED: pb.TASK_STATE_EXITED,
    TaskState.FAILED: pb.TASK_STATE_FAILED,
    TaskState.LOST: pb.TASK_STATE_LOST,
    TaskState.KILLED: pb.TASK_STATE_KILLED,
}
_MAINTENANCE_KINDS: Mapping[MaintenanceKind, pb.MaintenanceKind.ValueType] = {
    MaintenanceKind.REBOOT: pb.MAINTENANCE_KIND_REBOOT,
    MaintenanceKind.HARDWARE: pb.MAINTENANCE_KIND_HARDWARE,
    MaintenanceKind.NETWORK: pb.MAINTENANCE_KIND_NETWORK,
    MaintenanceKind.POWER: pb.MAINTENANCE_KIND_POWER,
    MaintenanceKind.DRAIN: pb.MAINTENANCE_KIND_DRAIN,
    MaintenanceKind.DECOMMISSION: pb.MAINTENANCE_KIND_DECOMMISSION,
    MaintenanceKind.EVICTION: pb.MAINTENANCE_KIND_EVICTION,
    MaintenanceKind.HARVEST_SHRINK: pb.MAINTENANCE_KIND_HARVEST_SHRINK,
}
COMPLETED = frozenset({OperationState.DONE, OperationState.CANCELLED})


class ControllerFailed(Exception):
    """The job's controller could not be reached, failed, or answered too late."""


@dataclass(frozen=True, slots=True)
class Pending:
    """A job's operations as the approval step sees them."""

    waiting: list[Stored[TaskOperation]]
    """Pending approval, oldest first."""
    approved: list[TaskOperation]
    completed: list[Stored[TaskOperation]]
    """Done or cancelled, not yet reported (and then forgotten)."""

    @classmethod
    def of(cls, view: JobView) -> Pending:
        operations = sorted(
            view.operations.values(), key=lambda s: (s.value.created_at, s.value.id)
        )
        return cls(
            [s for s in operations if s.value.state is OperationState.PENDING_APPROVAL],
            [s.value for s in operations if s.value.state is OperationState.APPROVED],
            [s for s in operations if s.value.state in COMPLETED],
        )


def unhealthy(view: JobView) -> list[int]:
    """Tasks of the job that should run and do not (by index)."""
    return [
        index
        for index, stored in sorted(view.tasks.items())
        if index < view.live_count and not is_healthy(stored.value, view.statuses.get(index))
    ]


def default_acks(view: JobView, pending: Pending) -> list[str]:
    """The built-in rule without a controller: preemptions at once; otherwise at most the
    update policy's `max_unavailable_percent` of the job's tasks (at least one) down at once,
    counting the unhealthy ones and those of operations already approved."""
    job = view.job.value
    budget = max(1, math.floor(job.spec.count * job.spec.update.max_unavailable_percent / 100))
    down = set(unhealthy(view))
    for operation in pending.approved:
        down.update(operation.tasks)
    acks = []
    for stored in pending.waiting:
        if stored.value.kind is OperationKind.PREEMPT:
            # Nobody to give notice to: the room is needed now.
            acks.append(stored.value.id)
            continue
        tasks = set(stored.value.tasks) - down
        if len(down) + len(tasks) > budget:
            break
        down |= tasks
        acks.append(stored.value.id)
    return acks


def _timestamp(moment: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def _task_ref(view: JobView, index: int) -> pb.TaskRef:
    task = view.tasks.get(index)
    machine = task.value.machine if task is not None else None
    return pb.TaskRef(
        job_handle=view.job.value.handle,
        index=index,
        task_id=f"{view.job.value.handle}/{index}",
        machine_id=machine or "",
    )


def _operation_message(view: JobView, operation: TaskOperation) -> pb.TaskOperation:
    message = pb.TaskOperation(
        id=operation.id,
        kind=_KINDS[operation.kind],
        tasks=[_task_ref(view, index) for index in operation.tasks],
        reason=operation.reason,
        state=_STATES[operation.state],
        created_at=_timestamp(operation.created_at),
        target_version=operation.target_version or "",
        target_machine=operation.target_machine or "",
    )
    if operation.deadline is not None:
        message.deadline.CopyFrom(_timestamp(operation.deadline))
    return message


def advance_notices(view: JobView, now: datetime) -> list[pb.AdvanceNotice]:
    """Maintenance not over yet on machines of the job's tasks: only those machines and tasks."""
    affected: dict[str, tuple[AdvanceNotice, dict[str, list[int]]]] = {}
    for index, stored in sorted(view.tasks.items()):
        machine = stored.value.machine
        if machine is None:
            continue
        for notice in view.maintenance.get(machine, ()):
            if now < notice.end:
                machines = affected.setdefault(notice.id, (notice, {}))[1]
                machines.setdefault(machine, []).append(index)
    messages = []
    for notice, machines in sorted(affected.values(), key=lambda a: (a[0].start, a[0].id)):
        messages.append(
            pb.AdvanceNotice(
                id=notice.id,
                machine_ids=sorted(machines),
                affected_tasks=[
                    _task_ref(view, index) for indexes in machines.values() for index in indexes
                ],
                start=_timestamp(notice.start),
                duration=Duration(seconds=notice.duration_s),
                kind=_MAINTENANCE_KINDS[notice.kind],
                reason=notice.reason,
            )
        )
    return messages


def control_request(
    view: JobView, pending: Pending, sequence: int, now: datetime
) -> pb.TaskControlRequest:
    """The full picture of the job for its controller."""
    unhealthy_tasks = []
    for index in unhealthy(view):
        task = view.tasks[index].value
        status = current_status(task, view.statuses.get(index))
        state = status.state if status is not None else task.state
        unhealthy_tasks.append(
            pb.UnhealthyTask(
                task=_task_ref(view, index),
                state=_TASK_STATES[state],
                reason=(status.message if status is not None else "") or task.message,
                since=_timestamp(status.updated_at if status is not None else task.updated_at),
            )
        )
    return pb.TaskControlRequest(
        job_handle=view.job.value.handle,
        sequence_number=sequence,
        pending_operations=[_operation_message(view, s.value) for s in pending.waiting],
        completed_operations=[_operation_message(view, s.value) for s in pending.completed],
        advance_notices=advance_notices(view, now),
        all_unhealthy_tasks=unhealthy_tasks,
        task_count=view.live_count,
    )


class ControllerClient:
    """Calls controllers' TaskController.Process, one channel per endpoint."""

    def __init__(self, timeout_s: float, tls: TlsSettings) -> None:
        self._timeout_s = timeout_s
        self._tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def process(
        self, registration: ControllerRegistration, request: pb.TaskControlRequest
    ) -> list[str]:
        """The ids the controller acknowledged, among the request's pending operations."""
        channel = self._channels.get(registration.endpoint)
        if channel is None:
            channel = grpc_channel(registration.endpoint, self._tls)
            self._channels[registration.endpoint] = channel
        stub = taskcontrol_pb2_grpc.TaskControllerStub(channel)
        try:
            response = await stub.Process(request, timeout=self._timeout_s)
        except grpc.aio.AioRpcError as error:
            raise ControllerFailed(
                f"controller at {registration.endpoint} failed: {error.code().name}: "
                f"{error.details()}"
            ) from error
        # Unknown and repeated ids are ignored, as the interface promises.
        pending = {operation.id for operation in request.pending_operations}
        return [ack for ack in dict.fromkeys(response.acknowledged_operation_ids) if ack in pending]

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(None)
        self._channels.clear()
