"""Tasks as their agents see them: a process started, a process ended."""

from __future__ import annotations

from dataclasses import dataclass

from tether.frontend.events.sources.base import Change, Source, of_task, read
from tether.model import TaskState, TaskStatus
from tether.model.event import EventKind, RegionEvent, RegionObject
from tether.model.task import FINISHED_STATES
from tether.store import KeyValue, keys


@dataclass(frozen=True, slots=True)
class StatusSeen:
    attempt: int
    state: TaskState
    machine: str
    detail: str


class Statuses(Source[StatusSeen]):
    prefix = keys.TASK_STATUS

    def digest(self, kv: KeyValue) -> StatusSeen | None:
        status = read(TaskStatus, kv)
        if status is None:
            return None
        if status.state is TaskState.RUNNING:
            detail = f"pid {status.pid}" if status.pid is not None else ""
        elif status.exit_code is not None:
            detail = f"exit code {status.exit_code}" + (
                f": {status.message}" if status.message else ""
            )
        else:
            detail = status.message
        return StatusSeen(status.attempt, status.state, status.machine, detail)

    def state(self, key: str, digest: StatusSeen) -> RegionObject:
        return RegionObject(
            what="task-status",
            **of_task(key),
            attempt=digest.attempt,
            machine=digest.machine,
            state=digest.state.value,
            detail=digest.detail,
        )

    def events(
        self, key: str, before: StatusSeen | None, after: StatusSeen | None, change: Change
    ) -> list[RegionEvent]:
        if after is None:
            return []
        if before is not None and (before.attempt, before.state) == (after.attempt, after.state):
            return []
        if after.state is TaskState.RUNNING:
            kind = EventKind.TASK_STARTED
        elif after.state in FINISHED_STATES:
            kind = EventKind.TASK_EXITED
        else:
            return []
        return [
            change.event(
                kind,
                **of_task(key),
                attempt=after.attempt,
                machine=after.machine,
                state=after.state.value,
                detail=after.detail,
            )
        ]
