"""Tasks: one instance of a job, its desired and observed state, and the legal state changes."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Self

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from tether.model.accelerator import AcceleratorSpec
from tether.model.base import JobHandle, Name, Quantity, TetherModel, Timestamp, Version
from tether.model.job import TaskTemplate


class TaskState(enum.StrEnum):
    """The observed state of a task."""

    PENDING = "pending"
    PLACED = "placed"
    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"
    FAILED = "failed"
    LOST = "lost"
    KILLED = "killed"


TERMINAL_STATES: Final = frozenset(
    {TaskState.EXITED, TaskState.FAILED, TaskState.LOST, TaskState.KILLED}
)
"""States in which the task's process no longer runs."""

FINISHED_STATES: Final = frozenset({TaskState.EXITED, TaskState.FAILED, TaskState.KILLED})
"""States an agent reports when an attempt ended: it runs nothing more for that attempt (LOST is
the scheduler's word for a task whose machine went down, not an agent's)."""

ON_MACHINE_STATES: Final = frozenset({TaskState.PLACED, TaskState.STARTING, TaskState.RUNNING})
"""States in which the task holds resources on its machine."""

_RESTARTABLE: Final = frozenset({TaskState.PENDING, TaskState.STARTING})

ALLOWED_TRANSITIONS: Final[Mapping[TaskState, frozenset[TaskState]]] = MappingProxyType(
    {
        TaskState.PENDING: frozenset({TaskState.PLACED, TaskState.KILLED}),
        # Back to PENDING when the placement is withdrawn before the agent starts the task.
        TaskState.PLACED: frozenset(
            {
                TaskState.STARTING,
                TaskState.PENDING,
                TaskState.FAILED,
                TaskState.LOST,
                TaskState.KILLED,
            }
        ),
        TaskState.STARTING: frozenset(
            {
                TaskState.RUNNING,
                TaskState.EXITED,
                TaskState.FAILED,
                TaskState.LOST,
                TaskState.KILLED,
            }
        ),
        TaskState.RUNNING: frozenset(
            {TaskState.EXITED, TaskState.FAILED, TaskState.LOST, TaskState.KILLED}
        ),
        # A finished task is restarted in place (STARTING) or placed anew (PENDING); a lost one
        # has no machine to restart on.
        TaskState.EXITED: _RESTARTABLE,
        TaskState.FAILED: _RESTARTABLE,
        TaskState.KILLED: _RESTARTABLE,
        TaskState.LOST: frozenset({TaskState.PENDING}),
    }
)
"""For each state, the states a task may move to next; staying in a state is not a transition."""


def can_transition(current: TaskState, new: TaskState) -> bool:
    """Whether a task in `current` may move to `new`."""
    return new in ALLOWED_TRANSITIONS[current]


class LogStream(enum.StrEnum):
    """Which of a task's output files to read."""

    STDOUT = "stdout"
    STDERR = "stderr"


class DesiredState(enum.StrEnum):
    """What the scheduler wants the task to be doing."""

    RUNNING = "running"
    STOPPED = "stopped"


class Task(TetherModel):
    """One task of a job as the store keeps it."""

    job: JobHandle
    index: Quantity
    generation: Quantity
    """The job generation whose spec this task runs."""
    attempt: Quantity = 0
    """Bumped by the scheduler every time it starts a new incarnation of the task (a placement or
    a restart). Agents report status per attempt and kill processes of any older attempt: this is
    the fencing token between the scheduler and the agents."""
    machine: Name | None = None
    move_to: Name | None = None
    """Where a move that released the task asked it to go (its MOVE operation's target): it is
    placed there if the machine still takes it, elsewhere if not."""
    desired: DesiredState = DesiredState.RUNNING
    state: TaskState = TaskState.PENDING
    restarts: Quantity = 0
    version: Version
    message: str = ""
    updated_at: Timestamp

    @model_validator(mode="after")
    def _on_machine_has_machine(self) -> Self:
        if self.machine is None and self.state in ON_MACHINE_STATES:
            raise PydanticCustomError(
                "task_without_machine",
                "a task in state '{state}' must name its machine",
                {"state": self.state.value},
            )
        return self

    @property
    def task_id(self) -> str:
        """`<entitlement>/<job>/<index>`."""
        return f"{self.job}/{self.index}"


class TaskStatus(TetherModel):
    """What the agent on the task's machine observed, for one attempt of the task.

    Agents are the only writers of status records; the scheduler owns `Task`. A status whose
    `attempt` is older than the task's describes a previous incarnation and is ignored.
    """

    job: JobHandle
    index: Quantity
    machine: Name
    attempt: Quantity
    state: TaskState
    pid: int | None = None
    exit_code: int | None = None
    """The process's exit code; negative when a signal killed it (-9 for SIGKILL)."""
    message: str = ""
    limits: str = ""
    """How the agent enforces the task's resource limits, e.g. "cgroup-v2", "rlimit"."""
    started_at: Timestamp | None = None
    finished_at: Timestamp | None = None
    progress: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Steps the task reports having made in all, the ones it resumed from included (it writes
    them to `TETHER_PROGRESS_FILE`); None: it reports none. Kept when the task is preempted
    or suspended, so that its next attempt resumes from them."""
    updated_at: Timestamp

    @property
    def task_id(self) -> str:
        """`<entitlement>/<job>/<index>`."""
        return f"{self.job}/{self.index}"


def current_status(task: Task, status: TaskStatus | None) -> TaskStatus | None:
    """The status when it reports the task's current attempt on its current machine, else None:
    a status of an older attempt describes a previous incarnation and is ignored."""
    if (
        status is None
        or task.state is TaskState.LOST
        or status.attempt != task.attempt
        or status.machine != task.machine
    ):
        return None
    return status


def effective_state(task: Task, status: TaskStatus | None) -> TaskState:
    """The state to show and act on: the agent's report when it is about the current attempt
    on the current machine, else the scheduler's own record."""
    current = current_status(task, status)
    return task.state if current is None else current.state


class Assignment(TetherModel):
    """A task incarnation the scheduler gave to one machine: everything its agent needs to run it.

    Kept under the machine's own prefix, so that an agent watches only its own work.
    """

    job: JobHandle
    index: Quantity
    attempt: Quantity
    generation: Quantity
    desired: DesiredState = DesiredState.RUNNING
    template: TaskTemplate
    at_most_once: bool = False
    """The job's `at_most_once`: the agent fences this attempt to its lease."""
    progress: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Steps the task's earlier attempts reported: where this one resumes (the agent passes
    them as `TETHER_PROGRESS`). None: none were reported."""
    accelerator: AcceleratorSpec | None = None
    """The job's `accelerator`: a simulated machine runs the task at its profiled speed."""

    @property
    def task_id(self) -> str:
        """`<entitlement>/<job>/<index>`."""
        return f"{self.job}/{self.index}"
