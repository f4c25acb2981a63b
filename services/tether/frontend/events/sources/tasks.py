"""Tasks as the scheduler keeps them: placed on a machine, restarted, lost with their machine."""

from __future__ import annotations

from dataclasses import dataclass

from tether.frontend.events.sources.base import Change, Source, of_task, read
from tether.model import Task, TaskState
from tether.model.event import EventKind, RegionEvent, RegionObject
from tether.store import KeyValue, keys


@dataclass(frozen=True, slots=True)
class TaskSeen:
    attempt: int
    state: TaskState
    machine: str | None
    restarts: int


class Tasks(Source[TaskSeen]):
    prefix = keys.TASKS

    def digest(self, kv: KeyValue) -> TaskSeen | None:
        task = read(Task, kv)
        if task is None:
            return None
        return TaskSeen(task.attempt, task.state, task.machine, task.restarts)

    def state(self, key: str, digest: TaskSeen) -> RegionObject:
        return RegionObject(
            what="task",
            **of_task(key),
            attempt=digest.attempt,
            machine=digest.machine,
            state=digest.state.value,
            detail=f"{digest.restarts} restart(s)",
        )

    def events(
        self, key: str, before: TaskSeen | None, after: TaskSeen | None, change: Change
    ) -> list[RegionEvent]:
        if after is None:
            return []
        about = {
            **of_task(key),
            "attempt": after.attempt,
            "machine": after.machine,
            "state": after.state.value,
        }
        found = []
        if after.restarts > (before.restarts if before else 0):
            detail = f"restart {after.restarts}"
            found.append(change.event(EventKind.TASK_RESTARTED, detail=detail, **about))
        new = before is None or (before.state, before.attempt) != (after.state, after.attempt)
        if new and after.state is TaskState.PLACED:
            found.append(change.event(EventKind.TASK_PLACED, **about))
        if new and after.state is TaskState.LOST:
            found.append(change.event(EventKind.TASK_LOST, **about))
        return found
