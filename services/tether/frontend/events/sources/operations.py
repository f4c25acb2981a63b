"""Task operations through TaskControl: proposed, approved, done or cancelled; the tasks a
preemption stopped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.frontend.events.sources.base import Change, Source, of_job, read
from tether.model.event import EventKind, RegionEvent, RegionObject
from tether.model.operation import OperationKind, OperationState, TaskOperation
from tether.store import KeyValue, keys

_KIND_OF_STATE = {
    OperationState.APPROVED: EventKind.OPERATION_APPROVED,
    OperationState.DONE: EventKind.OPERATION_DONE,
    OperationState.CANCELLED: EventKind.OPERATION_CANCELLED,
}


@dataclass(frozen=True, slots=True)
class OperationSeen:
    kind: OperationKind
    state: OperationState
    tasks: tuple[int, ...]
    target_machine: str | None
    reason: str


class Operations(Source[OperationSeen]):
    prefix = keys.OPERATIONS

    def digest(self, kv: KeyValue) -> OperationSeen | None:
        operation = read(TaskOperation, kv)
        if operation is None:
            return None
        return OperationSeen(
            operation.kind,
            operation.state,
            tuple(operation.tasks),
            operation.target_machine,
            operation.reason,
        )

    def state(self, key: str, digest: OperationSeen) -> RegionObject:
        return RegionObject(
            what="operation",
            **self._of(key),
            machine=digest.target_machine,
            state=digest.state.value,
            detail=f"{digest.kind.value} of task(s) {', '.join(map(str, digest.tasks))}",
        )

    def _of(self, key: str) -> dict[str, Any]:
        handle, _, operation_id = self.name(key).rpartition("/")
        return {**of_job(handle), "operation": operation_id}

    def events(
        self, key: str, before: OperationSeen | None, after: OperationSeen | None, change: Change
    ) -> list[RegionEvent]:
        if after is None:
            return []
        about = {**self._of(key), "machine": after.target_machine}
        found = []
        if before is None:
            tasks = ", ".join(map(str, after.tasks))
            detail = f"{after.kind.value} of task(s) {tasks}" + (
                f": {after.reason}" if after.reason else ""
            )
            proposed = EventKind.OPERATION_PROPOSED
            found.append(change.event(proposed, state="pending-approval", detail=detail, **about))
        for state in _passed(before.state if before else None, after.state):
            found.append(change.event(_KIND_OF_STATE[state], state=state.value, **about))
            if state is OperationState.DONE and after.kind is OperationKind.PREEMPT:
                found += [
                    change.event(EventKind.TASK_PREEMPTED, task=index, **about)
                    for index in after.tasks
                ]
        return found


_FORWARD = (OperationState.PENDING_APPROVAL, OperationState.APPROVED, OperationState.DONE)


def _passed(before: OperationState | None, after: OperationState) -> list[OperationState]:
    """The states an operation reached going from `before` to `after` (None: it was just
    proposed), in order: one write may approve an operation and carry it out."""
    if after is OperationState.CANCELLED:
        return [] if before is OperationState.CANCELLED else [after]
    if before is OperationState.CANCELLED:
        return []
    start = _FORWARD.index(before) + 1 if before else 1
    return list(_FORWARD[start : _FORWARD.index(after) + 1])
