"""How many tasks a job holds against its tree's quota, and what of a task that count reads."""

from __future__ import annotations

from collections.abc import Mapping

from tether.model import FINISHED_STATES, Job, Task
from tether.model.admission import Admission
from tether.scheduler.plan import Stored


def holding_of(job: Job, admission: Admission, tasks: Mapping[int, Stored[Task]]) -> int:
    """The tasks of the job that hold resources or may claim them: those on a machine, and
    the admitted ones that are not finished for good (created yet or not). A task off its
    machine is finished for good once its own state says so (the scheduler writes that when it
    releases a task that will not run again); statuses do not count."""
    admitted = 0 if job.deleting else min(admission.admitted, job.spec.count)
    held = 0
    below = 0
    for index, stored in tasks.items():
        task = stored.value
        if index < admitted:
            below += 1
        if task.machine is not None or (index < admitted and task.state not in FINISHED_STATES):
            held += 1
    return held + admitted - below


def holding_inputs(stored: Stored[Task] | None) -> tuple[bool, bool] | None:
    """What `holding_of` reads of one task (None: it does not exist): a change of a task that
    leaves these alone leaves the job's holding as it was."""
    if stored is None:
        return None
    return stored.value.machine is not None, stored.value.state in FINISHED_STATES
