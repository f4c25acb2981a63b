"""Where every job's tasks are held and what they hold: per machine the resources used and the
task count, per entitlement its usage, per job arrays of rows and resource shapes."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from tether.allocator.index.codes import NONE
from tether.allocator.index.columns import I32, I64, Columns

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, eq=False)
class Shape:
    """Resources some tasks hold, interned: their code, as stored (the JSON of `Resources`),
    and as a row of the resource columns."""

    code: int
    json: bytes
    vector: I64
    extra: tuple[tuple[str, int], ...]
    """Every extra resource by name, machine-offered or ephemeral alike (`extra_held`)."""


class JobTasks:
    """Where one job's tasks are held: per task index, the row (NONE: not held) and the code
    of the shape it holds. Arrays, not objects: a full region holds ten million tasks."""

    __slots__ = ("held", "rows", "shapes")

    def __init__(self) -> None:
        self.rows: I32 = np.full(0, NONE, np.int32)
        self.shapes: I32 = np.zeros(0, np.int32)
        self.held = 0

    def row_of(self, index: int) -> int:
        return int(self.rows[index]) if index < len(self.rows) else NONE

    def make_room(self, size: int) -> None:
        if size > len(self.rows):
            grown = max(size, 2 * len(self.rows))
            rows = np.full(grown, NONE, np.int32)
            rows[: len(self.rows)] = self.rows
            shapes = np.zeros(grown, np.int32)
            shapes[: len(self.shapes)] = self.shapes
            self.rows, self.shapes = rows, shapes

    def placed(self) -> dict[int, int]:
        """Task index -> row of every task held."""
        indexes = np.flatnonzero(self.rows != NONE)
        return dict(zip(indexes.tolist(), self.rows[indexes].tolist(), strict=True))


class HeldTasks:
    """Every task held in an allocation entry, charged to its machine's row and its
    entitlement's usage."""

    def __init__(self, columns: Columns) -> None:
        self._columns = columns
        self.jobs: dict[str, JobTasks] = {}
        self.usage: dict[str, I64] = {}
        self.shapes: list[Shape] = []
        self._shape_codes: dict[bytes, int] = {}
        self.duplicates: dict[tuple[str, int], dict[int, int]] = {}
        """Task -> {row: shape} of entries of a task beyond the one `jobs` points at (two
        allocators placed it at once): their resources count until the entries go."""
        self.extra_held: dict[tuple[str, str], dict[int, int]] = {}
        """(entitlement, extra resource name) -> row -> how much of it the entitlement's tasks
        hold there: ephemeral resources are the entitlement's own, so each counts apart (and
        sparsely: a label per gang would make a column per job)."""

    # --- shapes ------------------------------------------------------------------------------

    def shape(self, resources: Mapping[str, Any]) -> Shape:
        """The interned shape of `resources` (the JSON data of `Resources`)."""
        return self.shape_of(orjson.dumps(resources), resources)

    def shape_of(self, value: bytes, resources: Mapping[str, Any] | None = None) -> Shape:
        """The interned shape of an entry's value (`resources`: its data, if decoded)."""
        code = self._shape_codes.get(value)
        if code is None:
            data = orjson.loads(value) if resources is None else resources
            canonical = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
            code = self._shape_codes.get(canonical)
            if code is None:
                code = len(self.shapes)
                extra = tuple(sorted((data.get("extra") or {}).items()))
                self.shapes.append(Shape(code, value, self._columns.vector_of(data), extra))
                self._shape_codes[canonical] = code
            self._shape_codes[value] = code
        return self.shapes[code]

    # --- adding and removing -----------------------------------------------------------------

    def holds(self, row: int, job: str, index: int) -> bool:
        tasks = self.jobs.get(job)
        return tasks is not None and tasks.row_of(index) == row

    def add(self, row: int, job: str, index: int, shape: Shape) -> None:
        tasks = self.jobs.get(job)
        if tasks is None:
            tasks = self.jobs[job] = JobTasks()
        tasks.make_room(index + 1)
        elsewhere = int(tasks.rows[index])
        if elsewhere != NONE:
            # Two allocators placed the task at once: both entries hold resources until the
            # scheduler releases one.
            _log.warning("task %s/%d is held on two machines", job, index)
            moved = {elsewhere: int(tasks.shapes[index])}
            self.duplicates.setdefault((job, index), {}).update(moved)
        else:
            tasks.held += 1
        tasks.rows[index] = row
        tasks.shapes[index] = shape.code
        self._charge(row, entitlement_of(job), shape, 1)

    def add_placed(self, job: str, placements: Mapping[int, int], shape: Shape) -> None:
        """Adds tasks about to be committed (task index -> row), all of one shape, at once."""
        count = len(placements)
        indexes = np.fromiter(placements.keys(), np.intp, count)
        task_rows = np.fromiter(placements.values(), np.intp, count)
        rows, tasks_per_row = np.unique(task_rows, return_counts=True)
        tasks = self.jobs.get(job)
        if tasks is None:
            tasks = self.jobs[job] = JobTasks()
        tasks.make_room(int(indexes.max()) + 1)
        tasks.rows[indexes] = task_rows
        tasks.shapes[indexes] = shape.code
        tasks.held += count
        columns, vector = self._columns, shape.vector
        held = tasks_per_row[:, None] * vector
        columns.used[rows, : len(vector)] += held
        columns.free[rows, : len(vector)] -= held
        columns.task_count[rows] += tasks_per_row.astype(np.int32)
        entitlement = entitlement_of(job)
        self._add_usage(entitlement, vector * count)
        if shape.extra:  # a loop per machine: only for the shapes that hold extra resources
            for row, tasks_there in zip(rows.tolist(), tasks_per_row.tolist(), strict=True):
                self._hold_extra(entitlement, row, shape, tasks_there)

    def remove(self, row: int, job: str, index: int) -> None:
        tasks = self.jobs.get(job)
        duplicates = self.duplicates.get((job, index))
        if tasks is not None and tasks.row_of(index) == row:
            shape = self.shapes[int(tasks.shapes[index])]
            if duplicates:
                other, code = duplicates.popitem()
                tasks.rows[index], tasks.shapes[index] = other, code
            else:
                tasks.rows[index] = NONE
                tasks.held -= 1
                if not tasks.held:
                    del self.jobs[job]
        elif duplicates and row in duplicates:
            shape = self.shapes[duplicates.pop(row)]
        else:
            return
        if duplicates is not None and not duplicates:
            del self.duplicates[(job, index)]
        self._charge(row, entitlement_of(job), shape, -1)

    def _charge(self, row: int, entitlement: str, shape: Shape, tasks: int) -> None:
        """Adds `tasks` tasks of `shape` (negative: removed) to the row and to the
        entitlement's usage."""
        vector = shape.vector * tasks
        self._columns.used[row, : len(vector)] += vector
        self._columns.free[row, : len(vector)] -= vector
        self._columns.task_count[row] += tasks
        self._add_usage(entitlement, vector)
        self._hold_extra(entitlement, row, shape, tasks)

    def _hold_extra(self, entitlement: str, row: int, shape: Shape, tasks: int) -> None:
        for name, amount in shape.extra:
            held = self.extra_held.setdefault((entitlement, name), {})
            total = held.get(row, 0) + amount * tasks
            if total:
                held[row] = total
            else:
                held.pop(row, None)
                if not held:
                    del self.extra_held[(entitlement, name)]

    def _add_usage(self, entitlement: str, vector: I64) -> None:
        usage = self.usage_of(entitlement)
        usage[: len(vector)] += vector
        if usage.any():
            self.usage[entitlement] = usage
        else:
            self.usage.pop(entitlement, None)

    # --- reading -----------------------------------------------------------------------------

    def usage_of(self, entitlement: str) -> I64:
        """What the entitlement's tasks hold, summed over every allocation record."""
        usage = self.usage.get(entitlement)
        if usage is None:
            return np.zeros(len(self._columns.dimensions), np.int64)
        widened = self.usage[entitlement] = self._columns.widened(usage)
        return widened

    def held(self, job: str) -> dict[int, int]:
        """Task index -> row of every task of `job` held in some allocation entry."""
        tasks = self.jobs.get(job)
        return {} if tasks is None else tasks.placed()

    def holding(self, job: str, indexes: Sequence[int]) -> dict[int, list[int]]:
        """Row -> the tasks of `job` among `indexes` (every one held when empty) that it holds;
        a task held on two machines is listed under both."""
        held = self.held(job)
        chosen = held if not indexes else {i: held[i] for i in indexes if i in held}
        by_row = tasks_by_row(chosen)
        for task in chosen:
            for row in self.duplicates.get((job, task), {}):
                by_row.setdefault(row, []).append(task)
        return by_row

    def held_from(self, stopped: Mapping[str, int]) -> dict[int, tuple[I64, int]]:
        """Row -> (resources, tasks) that the tasks of each job `stopped` names, from the given
        task index on, hold there: what stopping them would free."""
        freed: dict[int, tuple[I64, int]] = {}

        def add(row: int, code: int) -> None:
            vector = self.shapes[code].vector
            known = freed.get(row)
            amount, tasks = known or (np.zeros(len(self._columns.dimensions), np.int64), 0)
            amount[: len(vector)] += vector
            freed[row] = (amount, tasks + 1)

        for job, first in stopped.items():
            tasks = self.jobs.get(job)
            if tasks is not None:
                indexes = np.flatnonzero(tasks.rows[first:] != NONE) + first
                for index in indexes.tolist():
                    add(int(tasks.rows[index]), int(tasks.shapes[index]))
            for (held_job, index), rows in self.duplicates.items():
                if held_job == job and index >= first:
                    for row, code in rows.items():
                        add(row, code)
        return freed

    def holders(self, entitlement: str, name: str) -> dict[int, list[str]]:
        """Row -> the tasks of the entitlement holding some of the extra resource `name`."""
        holding = {code for code, shape in enumerate(self.shapes) if name in dict(shape.extra)}
        found: dict[int, list[str]] = {}
        prefix = entitlement + "/"
        for job, tasks in self.jobs.items():
            if job.startswith(prefix):
                for index, row in tasks.placed().items():
                    if int(tasks.shapes[index]) in holding:
                        found.setdefault(row, []).append(f"{job}/{index}")
        return found

    def held_twice(self) -> dict[tuple[str, int], list[int]]:
        """(job, task index) -> the rows holding it, of every task held on more than one
        machine: two allocators placed it (a Place whose answer was lost, sent again to the
        other allocator before it saw the first one's commit)."""
        return {
            (job, index): [int(self.jobs[job].rows[index]), *rows]
            for (job, index), rows in self.duplicates.items()
        }

    def entry_names(self) -> list[str]:
        """`<machine>/<task id>` of every entry held."""
        ids = self._columns.ids
        names = [
            f"{ids[row]}/{job}/{index}"
            for job, tasks in self.jobs.items()
            for index, row in tasks.placed().items()
        ]
        for (job, index), rows in self.duplicates.items():
            names += [f"{ids[row]}/{job}/{index}" for row in rows]
        return names


def tasks_by_row(placements: Mapping[int, int]) -> dict[int, list[int]]:
    """Task index -> row turned into row -> task indexes (in the mapping's order)."""
    by_row: dict[int, list[int]] = {}
    for task, row in placements.items():
        by_row.setdefault(row, []).append(task)
    return by_row


def entitlement_of(job: str) -> str:
    return job.split("/", 1)[0]
