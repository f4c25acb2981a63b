"""What an assignment key and value of this machine say: the task, the assignment, its
environment."""

from __future__ import annotations

import logging
from typing import Final

import pydantic

from tether.agent.workdir import TaskRef
from tether.model import Assignment, TaskTemplate, from_json
from tether.store import KeyValue, keys

_log = logging.getLogger(__name__)

TEMPLATES_KEPT: Final = 4096


class SharedTemplates:
    """One copy of each job generation's task template for every assignment that carries it.

    A parsed template is most of a parsed assignment's memory (about 3.5 KB of 4), and every
    task of a job generation carries the same one: a machine running many tasks of a job, or
    the thousands of simulated machines of one process, keep one. The last `TEMPLATES_KEPT`
    generations are remembered.
    """

    def __init__(self) -> None:
        self._by_generation: dict[tuple[str, int], TaskTemplate] = {}

    def shared(self, assignment: Assignment) -> Assignment:
        """`assignment`, with the template of its job generation that is already known if it is
        the same one."""
        key = (assignment.job, assignment.generation)
        known = self._by_generation.get(key)
        if known is not None and known == assignment.template:
            return assignment.model_copy(update={"template": known})
        self._by_generation.pop(key, None)
        if len(self._by_generation) >= TEMPLATES_KEPT:
            del self._by_generation[next(iter(self._by_generation))]
        self._by_generation[key] = assignment.template
        return assignment


def task_at(machine_id: str, key: str) -> TaskRef | None:
    """The task an assignment key of the machine names; None when the key is not one that
    `keys.assignment` makes."""
    try:
        task = TaskRef(*keys.task_of_key(key))
        canonical = keys.assignment(machine_id, task.entitlement, task.job, task.index)
    except ValueError:
        return None
    return task if key == canonical else None


def assignment_at(
    machine_id: str, key: str, kv: KeyValue | None, templates: SharedTemplates
) -> tuple[TaskRef, Assignment] | None:
    """The task and assignment stored at `key` (its template shared through `templates`); None
    when there is none, or when the key or the value is malformed (logged)."""
    task = task_at(machine_id, key)
    if task is None:
        if kv is not None:
            _log.warning("ignoring assignment with a malformed key %r", key)
        return None
    assignment = None if kv is None else _parse(kv, task)
    return None if assignment is None else (task, templates.shared(assignment))


def task_environment(machine_id: str, task: TaskRef, assignment: Assignment) -> dict[str, str]:
    """The template's variables and Tether's own (the executor adds the basics)."""
    return {
        **assignment.template.env,
        "TETHER_JOB": assignment.job,
        "TETHER_TASK_INDEX": str(task.index),
        "TETHER_TASK_ID": task.task_id,
        "TETHER_TASK_ATTEMPT": str(assignment.attempt),
        "TETHER_MACHINE": machine_id,
        # Where its earlier attempts got to: a task that checkpoints resumes from there.
        "TETHER_PROGRESS": _steps(assignment.progress or 0.0),
    }


def _steps(steps: float) -> str:
    """Steps as a task reads them: an integer without a fraction."""
    return str(int(steps)) if steps.is_integer() else repr(steps)


def _parse(kv: KeyValue, task: TaskRef) -> Assignment | None:
    """The assignment in `kv`, stored under `task`'s key; None (logged) when it is malformed or
    names another task."""
    try:
        assignment = from_json(Assignment, kv.value, stored=True)
    except pydantic.ValidationError as error:
        _log.warning("ignoring malformed assignment %s: %s", kv.key, error)
        return None
    if assignment.task_id != task.task_id:
        _log.warning("ignoring assignment %s: it names task %s", kv.key, assignment.task_id)
        return None
    return assignment
