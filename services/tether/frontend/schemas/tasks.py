"""Task views: the scheduler's record merged with its agent's status."""

from __future__ import annotations

from tether.frontend.records import TaskRecords
from tether.frontend.schemas import View
from tether.model import DesiredState, TaskState, Timestamp


class TaskView(View):
    """One task with its effective state; process details come from the current attempt's
    status and are null until the agent reports it."""

    task_id: str
    index: int
    state: TaskState
    desired: DesiredState
    machine: str | None
    attempt: int
    restarts: int
    generation: int
    version: str
    """The package version this attempt runs."""
    pid: int | None
    exit_code: int | None
    message: str
    started_at: Timestamp | None
    updated_at: Timestamp
    progress: float | None = None
    """Steps the task last reported (`TETHER_PROGRESS_FILE`), by this attempt or, until it
    reports, the one it resumed from; None: it reports none."""

    @classmethod
    def of(cls, records: TaskRecords) -> TaskView:
        task, status = records.task, records.current_status
        return cls(
            task_id=task.task_id,
            index=task.index,
            state=records.state,
            desired=task.desired,
            machine=task.machine,
            attempt=task.attempt,
            restarts=task.restarts,
            generation=task.generation,
            version=task.version,
            pid=status.pid if status else None,
            exit_code=status.exit_code if status else None,
            # The agent's message explains a process's end; the scheduler's, a pending task.
            message=status.message if status and status.message else task.message,
            started_at=status.started_at if status else None,
            updated_at=max(task.updated_at, status.updated_at) if status else task.updated_at,
            progress=records.status.progress if records.status else None,
        )


class TaskList(View):
    tasks: list[TaskView]
