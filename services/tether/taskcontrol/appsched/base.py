"""What the reference controllers share: acknowledgements in flight, and logging decisions."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from tether.proto.taskcontrol.v1 import taskcontrol_pb2 as pb
from tether.taskcontrol.sdk import Controller

_log = logging.getLogger(__name__)


def task_indexes(operation: pb.TaskOperation) -> frozenset[int]:
    """The indexes of the tasks an operation acts on."""
    return frozenset(task.index for task in operation.tasks)


@dataclass(frozen=True, slots=True)
class Situation:
    """One call seen together with the controller's memory of its own acknowledgements: all a
    policy needs to decide."""

    job_handle: str
    task_count: int
    pending: tuple[pb.TaskOperation, ...]
    """Operations waiting for approval, oldest first."""
    unhealthy: frozenset[int]
    """Tasks that should run and do not."""
    in_flight: frozenset[int]
    """Tasks of operations acknowledged earlier that Tether has not reported completed yet:
    they are down, or about to be."""

    @property
    def down(self) -> frozenset[int]:
        """Tasks that count against a disruption budget."""
        return self.unhealthy | self.in_flight

    @classmethod
    def of(cls, request: pb.TaskControlRequest, in_flight: Iterable[int] = ()) -> Situation:
        """The request's picture plus the tasks of acknowledgements still in flight."""
        pending = sorted(
            request.pending_operations,
            key=lambda op: (op.created_at.seconds, op.created_at.nanos, op.id),
        )
        return cls(
            job_handle=request.job_handle,
            task_count=request.task_count,
            pending=tuple(pending),
            unhealthy=frozenset(unhealthy.task.index for unhealthy in request.all_unhealthy_tasks),
            in_flight=frozenset(in_flight),
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """The operations a policy acknowledges now, and why the others wait."""

    acks: list[str]
    why_others_wait: str = ""


class InFlightAcks:
    """Operations this controller acknowledged that Tether has not reported completed, per job.

    Tether may not have executed an acknowledged operation by the next call, and then it is
    neither pending nor completed: without this memory its tasks would look healthy, and a
    controller would approve more than its budget.
    """

    def __init__(self) -> None:
        self._tasks_by_operation: dict[str, dict[str, frozenset[int]]] = {}

    def settle(self, request: pb.TaskControlRequest) -> Situation:
        """Forgets acknowledgements the request shows are over, and returns its Situation.

        A completed operation was executed (its tasks now show as unhealthy until they run
        again) or withdrawn. An operation that is pending again was never approved: Tether did
        not get our answer.
        """
        acked = self._tasks_by_operation.pop(request.job_handle, {})
        for operation in (*request.completed_operations, *request.pending_operations):
            acked.pop(operation.id, None)
        if acked:
            self._tasks_by_operation[request.job_handle] = acked
        return Situation.of(request, (task for tasks in acked.values() for task in tasks))

    def remember(self, situation: Situation, acks: Iterable[str]) -> None:
        """Records the operations acknowledged in answer to `situation` as in flight."""
        acked = set(acks)
        if not acked:
            return
        in_flight = self._tasks_by_operation.setdefault(situation.job_handle, {})
        for operation in situation.pending:
            if operation.id in acked:
                in_flight[operation.id] = task_indexes(operation)


class ReferenceController(Controller):
    """A controller whose `plan` decides from a Situation; this base keeps the acknowledgements
    in flight and logs every decision."""

    def __init__(self) -> None:
        super().__init__()
        self._in_flight = InFlightAcks()

    async def plan(self, situation: Situation) -> Decision:
        """The operations of `situation.pending` to acknowledge now."""
        raise NotImplementedError

    async def decide(self, request: pb.TaskControlRequest) -> list[str]:
        situation = self._in_flight.settle(request)
        decision = await self.plan(situation)
        self._in_flight.remember(situation, decision.acks)
        waiting = len(situation.pending) - len(decision.acks)
        _log.info(
            "%s: acked %d of %d pending%s",
            situation.job_handle,
            len(decision.acks),
            len(situation.pending),
            f"; {waiting} wait: {decision.why_others_wait}" if waiting else "",
        )
        return decision.acks
