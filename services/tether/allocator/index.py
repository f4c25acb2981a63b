"""The allocator's columnar index: every machine of the region as rows of numpy columns.

A row is a machine id. Columns hold its inventory (capacity, topology, hardware type, host
profile, state, attributes) from `machines/`, and its allocation record (owner entitlement,
resources in use, task count, record revision) from `allocations/`. Around the columns sit the
sets placement starts from: the rows each entitlement owns, and the free pool by MSB, so that a
placement reads a few thousand rows instead of a million.
"""

from __future__ import annotations

import logging
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson
from pydantic import ValidationError

from tether.model import Allocation, Entitlement, Machine, MachineState, Resources, from_json
from tether.store import KeyValue, keys

_log = logging.getLogger(__name__)

I32 = npt.NDArray[np.int32]
I64 = npt.NDArray[np.int64]

BASE_DIMENSIONS: Final = ("cpu", "memory", "disk", "gpus")
"""Resource labels in column order; extra resources ("extra/<name>") follow as they appear."""
_FIELDS: Final = (("cpu", "cpu"), ("memory_mib", "memory"), ("disk_gib", "disk"), ("gpus", "gpus"))

ABSENT: Final = -1
"""State code of a row without a machine record (an allocation record seen first, or deleted)."""
STATE_CODES: Final = {
    MachineState.UP: 0,
    MachineState.DRAINING: 1,
    MachineState.MAINTENANCE: 2,
    MachineState.DOWN: 3,
    MachineState.DECOMMISSIONED: 4,
}
UP: Final = STATE_CODES[MachineState.UP]
DECOMMISSIONED: Final = STATE_CODES[MachineState.DECOMMISSIONED]
NONE: Final = -1
"""Code of "no value": the free pool as owner, no host profile, a missing attribute."""

_INITIAL_ROWS = 1024


class Codes:
    """Interned names: each distinct string gets a small integer, in order of appearance."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, name: str) -> int:
        """The name's code, assigned now if the name is new."""
        code = self._codes.get(name)
        if code is None:
            code = self._codes[name] = len(self.names)
            self.names.append(name)
        return code

    def find(self, name: str | None) -> int:
        """The name's code, or NONE for None or a name never seen."""
        return NONE if name is None else self._codes.get(name, NONE)

    def name(self, code: int) -> str | None:
        return None if code == NONE else self.names[code]


@dataclass(frozen=True, slots=True, eq=False)
class Shape:
    """Resources some tasks hold, interned: their code, as stored (the JSON of `Resources`),
    and as a row of the resource columns."""

    code: int
    json: bytes
    vector: I64


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


Header = tuple[int, int, float]
"""An allocation record (`Allocation`) as the columns keep it: owner, target profile, idle
since."""
FREE: Final[Header] = (NONE, NONE, math.nan)
"""The record of a free-pool machine."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The allocation records of the rows a job's tasks were added to tentatively, from
    before, and the tasks added."""

    rows: npt.NDArray[np.intp]
    revisions: I64
    owners: I32
    targets: I32
    idle: npt.NDArray[np.float64]
    job: str
    placements: Mapping[int, int]


@dataclass(frozen=True, slots=True)
class MachineInfo:
    """The static part of a machine record, as the columns keep it."""

    state: int
    dc: int
    msb: int
    rack: int
    hardware: int
    profile: int
    capacity: dict[str, int]
    attributes: dict[str, str]


class IndexListener:
    """Told when the index changes in ways a cache of machine choices depends on."""

    def joined(self, owner: int, row: int) -> None:
        """`row` was added to entitlement `owner` (its static properties unchanged)."""

    def owner_changed(self, owner: int) -> None:
        """A machine of entitlement `owner` left it or changed its static properties."""

    def pool_changed(self, msb: int) -> None:
        """A machine joined the free pool of `msb`, or one of its machines changed."""


class AllocationIndex:
    """Every machine of the region in columns, kept current from the store key by key."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.row_of: dict[str, int] = {}
        self.dimensions: list[str] = list(BASE_DIMENSIONS)
        self.dimension_of: dict[str, int] = {label: i for i, label in enumerate(BASE_DIMENSIONS)}
        self.dcs, self.msbs, self.racks = Codes(), Codes(), Codes()
        self.hardware, self.profiles, self.owners = Codes(), Codes(), Codes()
        self.msb_dc: list[int] = []
        """The datacenter of each MSB code."""
        self.rack_msb: list[int] = []
        """The MSB of each rack code."""
        self.msb_racks: dict[int, list[int]] = {}
        """The racks of each MSB."""
        self.attribute_values: dict[str, Codes] = {}
        self._allocate(_INITIAL_ROWS)
        self.attributes: dict[str, I32] = {}
        self._numbers: dict[str, npt.NDArray[np.float64]] = {}
        self.shapes: list[Shape] = []
        self._shape_codes: dict[bytes, int] = {}
        self._duplicates: dict[tuple[str, int], dict[int, int]] = {}
        """Task -> {row: shape} of entries of a task beyond the one `jobs` points at (two
        allocators placed it at once): their resources count until the entries go."""
        self._unreadable: dict[int, set[str]] = {}
        """Rows whose allocation record (name "") or entries (task ids) cannot be read."""
        # Derived from the columns and kept with them.
        self.owned: dict[int, set[int]] = {}
        self.pool: dict[int, set[int]] = {}
        """Rows of the free pool by MSB, machines of every state (placement filters by state)."""
        self.owned_hardware: dict[int, Counter[int]] = {}
        self.usage: dict[str, I64] = {}
        self.jobs: dict[str, JobTasks] = {}
        self.entitlements: dict[str, Entitlement] = {}
        self.listeners: list[IndexListener] = []

    # --- columns -----------------------------------------------------------------------------

    def _allocate(self, rows: int) -> None:
        width = len(self.dimensions)
        self.capacity: I64 = np.zeros((rows, width), np.int64)
        self.used: I64 = np.zeros((rows, width), np.int64)
        self.state: npt.NDArray[np.int8] = np.full(rows, ABSENT, np.int8)
        self.dc: I32 = np.full(rows, NONE, np.int32)
        self.msb: I32 = np.full(rows, NONE, np.int32)
        self.rack: I32 = np.full(rows, NONE, np.int32)
        self.hw: I32 = np.full(rows, NONE, np.int32)
        self.profile: I32 = np.full(rows, NONE, np.int32)
        self.owner: I32 = np.full(rows, NONE, np.int32)
        self.target: I32 = np.full(rows, NONE, np.int32)
        self.revision: I64 = np.zeros(rows, np.int64)
        self.digest: I64 = np.zeros(rows, np.int64)
        """Hash of the machine record's value (0: none), to skip records that did not change."""
        self.readable: npt.NDArray[np.bool_] = np.ones(rows, np.bool_)
        self.task_count: I32 = np.zeros(rows, np.int32)
        self.idle_since: npt.NDArray[np.float64] = np.full(rows, math.nan)

    def _grow(self) -> None:
        old = len(self.state)
        for name in (
            "capacity", "used", "state", "dc", "msb", "rack", "hw", "profile", "owner",
            "target", "revision", "digest", "readable", "task_count", "idle_since",
        ):  # fmt: skip
            column = getattr(self, name)
            grown = np.resize(column, (old * 2, *column.shape[1:]))
            grown[old:] = _FILL[name]
            setattr(self, name, grown)
        for attribute, column in self.attributes.items():
            grown = np.resize(column, old * 2)
            grown[old:] = NONE
            self.attributes[attribute] = grown
        self._numbers.clear()

    def _dimension(self, label: str) -> int:
        column = self.dimension_of.get(label)
        if column is None:
            column = self.dimension_of[label] = len(self.dimensions)
            self.dimensions.append(label)
            rows = len(self.state)
            self.capacity = np.hstack([self.capacity, np.zeros((rows, 1), np.int64)])
            self.used = np.hstack([self.used, np.zeros((rows, 1), np.int64)])
            self.usage = {
                name: np.append(amount, np.int64(0)) for name, amount in self.usage.items()
            }
        return column

    def vector(self, resources: Resources) -> I64:
        """`resources` as a row of the resource columns (new extra resources add a column)."""
        amounts = resources.amounts()
        for label in amounts:
            self._dimension(label)
        vector = np.zeros(len(self.dimensions), np.int64)
        for label, amount in amounts.items():
            vector[self.dimension_of[label]] = amount
        return vector

    def _vector_of(self, data: Mapping[str, Any]) -> I64:
        vector = np.zeros(len(self.dimensions), np.int64)
        for field, label in _FIELDS:
            amount = data.get(field, 0)
            if amount:
                vector[self.dimension_of[label]] = amount
        extra = data.get("extra") or {}
        for name, amount in extra.items():
            column = self._dimension(f"extra/{name}")
            if column >= len(vector):
                vector = np.append(vector, np.zeros(column + 1 - len(vector), np.int64))
            vector[column] = amount
        return vector

    def row(self, machine_id: str) -> int:
        """The machine's row, added now if the id is new."""
        row = self.row_of.get(machine_id)
        if row is None:
            row = self.row_of[machine_id] = len(self.ids)
            self.ids.append(machine_id)
            if row >= len(self.state):
                self._grow()
        return row

    @property
    def rows(self) -> int:
        """How many rows are in use (machines and allocation records ever seen)."""
        return len(self.ids)

    def numbers(self, attribute: str) -> npt.NDArray[np.float64]:
        """The attribute as numbers per row (NaN: missing or not a number), computed once."""
        numbers = self._numbers.get(attribute)
        if numbers is None:
            codes = self.attributes.get(attribute)
            values = self.attribute_values.get(attribute)
            numbers = np.full(len(self.state), math.nan)
            if codes is not None and values is not None:
                table = np.array([_number(name) for name in values.names] + [math.nan])
                numbers = table[codes]  # NONE (-1) picks the trailing NaN
            self._numbers[attribute] = numbers
        return numbers

    def attribute_column(self, attribute: str) -> I32:
        column = self.attributes.get(attribute)
        if column is None:
            column = self.attributes[attribute] = np.full(len(self.state), NONE, np.int32)
            self.attribute_values[attribute] = Codes()
        return column

    # --- machines ----------------------------------------------------------------------------

    def set_machine(self, machine_id: str, value: bytes | None) -> None:
        """Applies the current value of `machines/<machine_id>` (None: deleted)."""
        digest = 0 if value is None else hash(value) or 1
        row = self.row_of.get(machine_id)
        if row is not None and self.digest[row] == digest:
            return
        info = None if value is None else self._decode_machine(machine_id, value)
        if info is None and row is None:
            return
        row = self.row(machine_id)
        self.digest[row] = digest if info is not None else 0
        owner = int(self.owner[row])
        old_msb, old_hardware = int(self.msb[row]), int(self.hw[row])
        if info is None:
            self.state[row] = ABSENT
            self.capacity[row] = 0
            self._set_attributes(row, {})
        else:
            self.state[row] = info.state
            self.dc[row], self.msb[row], self.rack[row] = info.dc, info.msb, info.rack
            self.hw[row], self.profile[row] = info.hardware, info.profile
            columns = [self._dimension(label) for label in info.capacity]
            self.capacity[row] = 0
            self.capacity[row, columns] = list(info.capacity.values())
            self._set_attributes(row, info.attributes)
        if owner != NONE:
            if info is not None and old_hardware != info.hardware:
                self.owned_hardware[owner][old_hardware] -= 1
                self.owned_hardware[owner][info.hardware] += 1
            for listener in self.listeners:
                listener.owner_changed(owner)
        else:
            self._place_in_pool(row, old_msb)
        self._numbers.clear()

    def set_machines(self, machines: Sequence[tuple[str, bytes]]) -> None:
        """Applies many machine records at once (a page of the first listing): new machines go
        into the columns in one assignment per column; any other goes through `set_machine`."""
        rows: list[int] = []
        infos: list[MachineInfo] = []
        digests: list[int] = []
        for machine_id, value in machines:
            row = self.row_of.get(machine_id)
            if row is not None and (self.digest[row] or self.owner[row] != NONE):
                self.set_machine(machine_id, value)
                continue
            info = self._decode_machine(machine_id, value)
            if info is None:
                continue
            rows.append(self.row(machine_id))
            infos.append(info)
            digests.append(hash(value) or 1)
        if not rows:
            return
        at = np.array(rows, np.intp)
        self.digest[at] = digests
        self.state[at] = [info.state for info in infos]
        self.dc[at] = [info.dc for info in infos]
        self.msb[at] = [info.msb for info in infos]
        self.rack[at] = [info.rack for info in infos]
        self.hw[at] = [info.hardware for info in infos]
        self.profile[at] = [info.profile for info in infos]
        capacity = np.zeros((len(rows), len(self.dimensions)), np.int64)
        for position, info in enumerate(infos):
            for label, amount in info.capacity.items():
                column = self._dimension(label)
                if column >= capacity.shape[1]:
                    capacity = np.hstack(
                        [capacity, np.zeros((len(rows), column + 1 - capacity.shape[1]), np.int64)]
                    )
                capacity[position, column] = amount
        self.capacity[at] = capacity
        by_attribute: dict[str, tuple[list[int], list[int]]] = {}
        for row, info in zip(rows, infos, strict=True):
            for attribute, label in info.attributes.items():
                codes = self.attribute_values.get(attribute)
                if codes is None:
                    self.attribute_column(attribute)
                    codes = self.attribute_values[attribute]
                where, what = by_attribute.setdefault(attribute, ([], []))
                where.append(row)
                what.append(codes.code(label))
        for attribute, (where, what) in by_attribute.items():
            self.attributes[attribute][where] = what
        for row, info in zip(rows, infos, strict=True):
            self.pool.setdefault(info.msb, set()).add(row)
        for msb in {info.msb for info in infos}:
            for listener in self.listeners:
                listener.pool_changed(msb)
        self._numbers.clear()

    def _set_attributes(self, row: int, new: Mapping[str, str]) -> None:
        for attribute, column in self.attributes.items():
            if attribute not in new:
                column[row] = NONE
        for attribute, value in new.items():
            column = self.attribute_column(attribute)
            column[row] = self.attribute_values[attribute].code(value)

    def _place_in_pool(self, row: int, old_msb: int) -> None:
        if old_msb != NONE:
            self.pool.get(old_msb, set()).discard(row)
        if self.state[row] != ABSENT and self.owner[row] == NONE:
            msb = int(self.msb[row])
            self.pool.setdefault(msb, set()).add(row)
            for listener in self.listeners:
                listener.pool_changed(msb)

    def _decode_machine(self, machine_id: str, value: bytes) -> MachineInfo | None:
        try:
            data = orjson.loads(value)
            topology = data["topology"]
            dc, msb, rack = topology["dc"], topology["msb"], topology["rack"]
            capacity = data["capacity"]
            amounts = {label: int(capacity.get(field, 0)) for field, label in _FIELDS}
            amounts.update({f"extra/{k}": int(v) for k, v in capacity.get("extra", {}).items()})
            state = STATE_CODES[MachineState(data.get("state", "up"))]
            attributes = dict(data.get("attributes") or {})
            hardware = data["hardware_type"]
            current = data.get("host_profile_current")
            if (
                not all(isinstance(v, str) for v in (dc, msb, rack, hardware))
                or data.get("id") != machine_id
                or any(amount < 0 for amount in amounts.values())
            ):
                raise ValueError("malformed")
        except (ValueError, KeyError, TypeError, AttributeError):
            # The fast path could not read it; the model says exactly what is wrong.
            try:
                machine = from_json(Machine, value, stored=True)
            except ValidationError as error:
                _log.warning("ignoring machine %s: not a valid Machine: %s", machine_id, error)
                return None
            if machine.id != machine_id:
                _log.warning("ignoring machines/%s: it holds machine %s", machine_id, machine.id)
                return None
            return self._decode_machine(machine_id, machine.model_dump_json().encode())
        dc_code = self.dcs.code(dc)
        msb_code = self._msb_code(dc_code, dc, msb)
        rack_code = self.racks.code(f"{dc}/{msb}/{rack}")
        if rack_code == len(self.rack_msb):
            self.rack_msb.append(msb_code)
            self.msb_racks.setdefault(msb_code, []).append(rack_code)
        return MachineInfo(
            state=state,
            dc=dc_code,
            msb=msb_code,
            rack=rack_code,
            hardware=self.hardware.code(hardware),
            profile=NONE if current is None else self.profiles.code(current),
            capacity=amounts,
            attributes=attributes,
        )

    def _msb_code(self, dc_code: int, dc: str, msb: str) -> int:
        code = self.msbs.code(f"{dc}/{msb}")
        if code == len(self.msb_dc):
            self.msb_dc.append(dc_code)
        return code

    # --- allocation records ------------------------------------------------------------------

    def set_allocation(self, name: str, kv: KeyValue | None, revision: int) -> None:
        """Applies the key `allocations/<name>` as of `revision` (kv None: deleted then): a
        machine's allocation record (name: the machine id) or one of its entries (name:
        `<machine>/<task id>`).

        Records only move forward: a record older than the one held (a watch event arriving
        after the allocator's own commit) is ignored, so a row's revision and content always
        belong together, which the commit's compare relies on. Entries older than the row's
        record are ignored too; newer ones, or ones of the same transaction as the record, are
        applied, and applying an entry twice changes nothing.
        """
        machine_id, _, task_id = name.partition("/")
        row = self.row(machine_id)
        held = int(self.revision[row])
        if task_id:
            if (kv.mod_revision if kv else revision) >= held:
                self._set_entry(row, task_id, None if kv is None else kv.value)
            return
        if kv is None:
            if held and held < revision:
                self.set_header(row, FREE, 0)
                self._mark_readable(row, "", True)
            return
        if kv.mod_revision > held:
            self._apply_header(row, self._decode_header(row, kv.value), kv.mod_revision)

    def set_allocations(self, kvs: Sequence[KeyValue]) -> None:
        """Applies a page of a listing: free-pool records of rows without one only set their
        revision (in one assignment); other records go through `set_allocation`.

        Every entry listed is applied, however old: a listing is one snapshot, and an entry in
        it exists, even though its machine's record was written again since (a later commit on
        the machine). `set_allocation`'s rule for watch events would drop it."""
        empty_rows: list[int] = []
        revisions: list[int] = []
        start = len(keys.ALLOCATIONS)
        for kv in kvs:
            name = kv.key[start:]
            machine_id, _, task_id = name.partition("/")
            if task_id:
                self._set_entry(self.row(machine_id), task_id, kv.value)
                continue
            row = self.row(name)
            if self.revision[row]:
                self.set_allocation(name, kv, kv.mod_revision)
                continue
            header = self._decode_header(row, kv.value)
            if header is not None and _is_free(header):
                empty_rows.append(row)
                revisions.append(kv.mod_revision)
            else:
                self._apply_header(row, header, kv.mod_revision)
        if empty_rows:
            self.revision[empty_rows] = revisions

    def place_tentatively(
        self, job: str, placements: Mapping[int, int], shape: Shape, joined: Header | None
    ) -> Snapshot:
        """Shows a job's tasks about to be committed (task index -> row) to later plans,
        keeping the rows' revisions (the commit's base); `joined` is the record of the rows
        that move from the free pool into an entitlement (those whose owner is NONE). Returns
        what `roll_back` needs to undo it."""
        count = len(placements)
        indexes = np.fromiter(placements.keys(), np.intp, count)
        task_rows = np.fromiter(placements.values(), np.intp, count)
        rows, tasks_per_row = np.unique(task_rows, return_counts=True)
        snapshot = Snapshot(
            rows,
            self.revision[rows].copy(),
            self.owner[rows].copy(),
            self.target[rows].copy(),
            self.idle_since[rows].copy(),
            job,
            placements,
        )
        if not count:
            return snapshot
        if joined is not None:
            for row in rows[snapshot.owners == NONE].tolist():
                self.set_header(row, joined, int(self.revision[row]))
        # A machine taking tasks is no longer idle.
        self.idle_since[rows] = math.nan
        tasks = self.jobs.get(job)
        if tasks is None:
            tasks = self.jobs[job] = JobTasks()
        tasks.make_room(int(indexes.max()) + 1)
        tasks.rows[indexes] = task_rows
        tasks.shapes[indexes] = shape.code
        tasks.held += count
        vector = shape.vector
        self.used[rows, : len(vector)] += tasks_per_row[:, None] * vector
        self.task_count[rows] += tasks_per_row.astype(np.int32)
        self._add_usage(_entitlement_of(job), vector * count)
        return snapshot

    def confirm(self, rows: Iterable[int], revision: int) -> None:
        """The tentative records of `rows` were committed in transaction `revision`."""
        for row in rows:
            if self.revision[row] < revision:
                self.revision[row] = revision

    def roll_back(self, snapshot: Snapshot) -> None:
        """Undoes `place_tentatively`; the records too where the store's newer record did not
        replace them meanwhile."""
        for index, row in snapshot.placements.items():
            self._remove_task(row, snapshot.job, index)
        unchanged = np.flatnonzero(self.revision[snapshot.rows] == snapshot.revisions)
        for position in unchanged.tolist():
            header = (
                int(snapshot.owners[position]),
                int(snapshot.targets[position]),
                float(snapshot.idle[position]),
            )
            self.set_header(int(snapshot.rows[position]), header, int(snapshot.revisions[position]))

    def remove(
        self, row: int, job: str, indexes: Iterable[int], header: Header, revision: int
    ) -> None:
        """Applies a committed release: the tasks left `row`, whose record is now `header`."""
        for index in indexes:
            self._remove_task(row, job, index)
        self.set_header(row, header, revision)

    def header(self, row: int) -> Header:
        return int(self.owner[row]), int(self.target[row]), float(self.idle_since[row])

    def header_json(self, row: int, header: Header | None = None) -> bytes:
        """The row's allocation record (or `header` for it) as stored: the JSON of
        `tether.model.Allocation`."""
        owner, target, idle = self.header(row) if header is None else header
        return orjson.dumps(
            {
                "machine": self.ids[row],
                "entitlement": self.owners.name(owner),
                "host_profile": self.profiles.name(target),
                "idle_since": None
                if math.isnan(idle)
                else datetime.fromtimestamp(idle, UTC).isoformat(),
            }
        )

    def shape(self, resources: Mapping[str, Any]) -> Shape:
        """The interned shape of `resources` (the JSON data of `Resources`)."""
        return self._shape_of(orjson.dumps(resources), resources)

    def _shape_of(self, value: bytes, resources: Mapping[str, Any] | None = None) -> Shape:
        code = self._shape_codes.get(value)
        if code is None:
            data = orjson.loads(value) if resources is None else resources
            canonical = orjson.dumps(data, option=orjson.OPT_SORT_KEYS)
            code = self._shape_codes.get(canonical)
            if code is None:
                code = len(self.shapes)
                self.shapes.append(Shape(code, value, self._vector_of(data)))
                self._shape_codes[canonical] = code
            self._shape_codes[value] = code
        return self.shapes[code]

    def set_header(self, row: int, header: Header, revision: int) -> None:
        """Applies the row's allocation record as of `revision` (a committed one that changed
        no entries, or one read from the store)."""
        owner, target, idle = header
        old_owner = int(self.owner[row])
        self.revision[row] = revision
        self.target[row] = target
        self.idle_since[row] = idle
        if owner != old_owner:
            self._change_owner(row, old_owner, owner)

    def _set_entry(self, row: int, task_id: str, value: bytes | None) -> None:
        job, _, index_text = task_id.rpartition("/")
        try:
            index = int(index_text)
            if index < 0 or job.count("/") != 1:
                raise ValueError("malformed")
        except ValueError:
            _log.warning("machine %s: ignoring allocation entry %r", self.ids[row], task_id)
            return
        if value is None:
            self._remove_task(row, job, index)
            self._mark_readable(row, task_id, True)
            return
        tasks = self.jobs.get(job)
        if tasks is not None and tasks.row_of(index) == row:
            return  # this allocator's own commit, or a listing after it
        try:
            shape = self._shape_of(value)
        except (ValueError, TypeError, AttributeError):
            # Unknown content: placing anything there could over-commit the machine.
            _log.warning("machine %s: unreadable allocation entry %s", self.ids[row], task_id)
            self._mark_readable(row, task_id, False)
            return
        self._mark_readable(row, task_id, True)
        self._add_task(row, sys.intern(job), index, shape)

    def _add_task(self, row: int, job: str, index: int, shape: Shape) -> None:
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
            self._duplicates.setdefault((job, index), {}).update(moved)
        else:
            tasks.held += 1
        tasks.rows[index] = row
        tasks.shapes[index] = shape.code
        self._charge(row, _entitlement_of(job), shape.vector, 1)

    def _remove_task(self, row: int, job: str, index: int) -> None:
        tasks = self.jobs.get(job)
        duplicates = self._duplicates.get((job, index))
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
            del self._duplicates[(job, index)]
        self._charge(row, _entitlement_of(job), -shape.vector, -1)

    def _charge(self, row: int, entitlement: str, vector: I64, tasks: int) -> None:
        """Adds `tasks` tasks holding `vector` in all (negative: removed) to the row and to the
        entitlement's usage."""
        self.used[row, : len(vector)] += vector
        self.task_count[row] += tasks
        self._add_usage(entitlement, vector)

    def _add_usage(self, entitlement: str, vector: I64) -> None:
        usage = self.usage.get(entitlement)
        if usage is None:
            usage = self.usage[entitlement] = np.zeros(len(self.dimensions), np.int64)
        usage[: len(vector)] += vector
        if not usage.any():
            del self.usage[entitlement]

    def _apply_header(self, row: int, header: Header | None, revision: int) -> None:
        """Applies a record read from the store (None: unreadable, which keeps the machine out
        of placement until it is fixed)."""
        self._mark_readable(row, "", header is not None)
        if header is None:
            self.revision[row] = revision
        else:
            self.set_header(row, header, revision)

    def _mark_readable(self, row: int, name: str, readable: bool) -> None:
        """Records whether the row's record (name "") or entry `name` can be read: a row with
        anything unreadable takes no tasks until it is fixed."""
        unreadable = self._unreadable.get(row)
        if readable:
            if unreadable is not None:
                unreadable.discard(name)
                if not unreadable:
                    del self._unreadable[row]
                    self.readable[row] = True
        else:
            self._unreadable.setdefault(row, set()).add(name)
            self.readable[row] = False

    def _decode_header(self, row: int, value: bytes) -> Header | None:
        try:
            data = orjson.loads(value)
            owner, target, idle = data["entitlement"], data["host_profile"], data["idle_since"]
            if data.get("machine") != self.ids[row] or not all(
                name is None or isinstance(name, str) for name in (owner, target, idle)
            ):
                raise ValueError("malformed")
            return (
                NONE if owner is None else self.owners.code(owner),
                NONE if target is None else self.profiles.code(target),
                math.nan if idle is None else datetime.fromisoformat(idle).timestamp(),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            try:
                from_json(Allocation, value, stored=True)
                reason = f"it names another machine than {self.ids[row]}"
            except ValidationError as error:
                reason = str(error)
            # Unknown content: placing anything there could over-commit the machine.
            _log.warning("machine %s: unreadable allocation record: %s", self.ids[row], reason)
            return None

    def _change_owner(self, row: int, old: int, new: int) -> None:
        self.owner[row] = new
        hardware = int(self.hw[row])
        if old != NONE:
            self.owned[old].discard(row)
            self.owned_hardware[old][hardware] -= 1
            for listener in self.listeners:
                listener.owner_changed(old)
        if new != NONE:
            self.owned.setdefault(new, set()).add(row)
            self.owned_hardware.setdefault(new, Counter())[hardware] += 1
            msb = int(self.msb[row])
            if msb != NONE:
                self.pool.get(msb, set()).discard(row)
            for listener in self.listeners:
                listener.joined(new, row)
        else:
            self._place_in_pool(row, int(self.msb[row]))

    # --- entitlements ------------------------------------------------------------------------

    def set_entitlement(self, name: str, value: bytes | None) -> None:
        """Applies the current value of `entitlements/<name>` (None: deleted)."""
        entitlement = None
        if value is not None:
            try:
                entitlement = from_json(Entitlement, value, stored=True)
            except ValidationError as error:
                _log.warning("ignoring entitlement %s: not a valid Entitlement: %s", name, error)
        if entitlement is None:
            self.entitlements.pop(name, None)
        else:
            self.entitlements[name] = entitlement
            self.owners.code(name)
        for listener in self.listeners:
            listener.owner_changed(self.owners.find(name))

    # --- listing -----------------------------------------------------------------------------

    def owned_rows(self, owner: int) -> Iterable[int]:
        return self.owned.get(owner, ())

    def usage_of(self, entitlement: str) -> I64:
        """What the entitlement's tasks hold, summed over every allocation record."""
        usage = self.usage.get(entitlement)
        if usage is None:
            return np.zeros(len(self.dimensions), np.int64)
        if len(usage) < len(self.dimensions):
            usage = self.usage[entitlement] = np.append(
                usage, np.zeros(len(self.dimensions) - len(usage), np.int64)
            )
        return usage

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
            for row in self._duplicates.get((job, task), {}):
                by_row.setdefault(row, []).append(task)
        return by_row

    def held_twice(self) -> dict[tuple[str, int], list[int]]:
        """(job, task index) -> the rows holding it, of every task held on more than one
        machine: two allocators placed it (a Place whose answer was lost, sent again to the
        other allocator before it saw the first one's commit)."""
        return {
            (job, index): [int(self.jobs[job].rows[index]), *rows]
            for (job, index), rows in self._duplicates.items()
        }

    def placements(self, job: str) -> dict[int, str]:
        """Task index -> machine id for every task of `job` held in some allocation entry."""
        return {index: self.ids[row] for index, row in self.held(job).items()}

    def live_rows(self) -> npt.NDArray[np.intp]:
        """Rows that have a machine record."""
        return np.flatnonzero(self.state[: self.rows] != ABSENT)

    def machines_present(self) -> list[str]:
        return [self.ids[row] for row in self.live_rows()]

    def records_present(self) -> list[str]:
        """Names under `allocations/` the index holds: machine ids and `<machine>/<task id>`."""
        names = [self.ids[row] for row in np.flatnonzero(self.revision[: self.rows])]
        for job, tasks in self.jobs.items():
            names += [f"{self.ids[row]}/{job}/{index}" for index, row in tasks.placed().items()]
        for (job, index), rows in self._duplicates.items():
            names += [f"{self.ids[row]}/{job}/{index}" for row in rows]
        return names


_FILL: Final[dict[str, Any]] = {
    "capacity": 0,
    "used": 0,
    "state": ABSENT,
    "dc": NONE,
    "msb": NONE,
    "rack": NONE,
    "hw": NONE,
    "profile": NONE,
    "owner": NONE,
    "target": NONE,
    "revision": 0,
    "digest": 0,
    "readable": True,
    "task_count": 0,
    "idle_since": math.nan,
}


def _is_free(header: Header) -> bool:
    owner, target, idle = header
    return owner == NONE and target == NONE and math.isnan(idle)


def tasks_by_row(placements: Mapping[int, int]) -> dict[int, list[int]]:
    """Task index -> row turned into row -> task indexes (in the mapping's order)."""
    by_row: dict[int, list[int]] = {}
    for task, row in placements.items():
        by_row.setdefault(row, []).append(task)
    return by_row


def _entitlement_of(job: str) -> str:
    return job.split("/", 1)[0]


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


Apply = Callable[[str, KeyValue | None, int], None]
"""Applies one key's current value: (key after the prefix, value or None, revision)."""


class _Sink:
    """Feeds one prefix of the store into the index, key by key or a page at a time."""

    def __init__(
        self,
        prefix: str,
        apply: Apply,
        present: Callable[[], Iterable[str]],
        apply_page: Callable[[Sequence[KeyValue]], None] | None = None,
    ) -> None:
        self._start = len(prefix)
        self._apply = apply
        self._present = present
        self._apply_page = apply_page
        self._listed: set[str] | None = None
        """Keys seen by the listing under way (None: following the watch)."""

    def begin_listing(self) -> None:
        self._listed = set()

    def put(self, kv: KeyValue) -> None:
        self._apply(kv.key[self._start :], kv, kv.mod_revision)

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        if self._listed is not None:
            start = self._start
            self._listed.update(kv.key[start:] for kv in kvs)
        if self._apply_page is not None:
            self._apply_page(kvs)
        else:
            for kv in kvs:
                self.put(kv)

    def delete(self, key: str, revision: int) -> None:
        self._apply(key[self._start :], None, revision)

    def end_listing(self, revision: int) -> None:
        listed = self._listed or set()
        gone = [name for name in self._present() if name not in listed]
        for name in gone:
            self._apply(name, None, revision)
        self._listed = None


def sinks(index: AllocationIndex) -> dict[str, _Sink]:
    """A feed sink per prefix the index is built from."""
    return {
        keys.ENTITLEMENTS: _Sink(
            keys.ENTITLEMENTS,
            lambda name, kv, _: index.set_entitlement(name, None if kv is None else kv.value),
            lambda: list(index.entitlements),
        ),
        keys.MACHINES: _Sink(
            keys.MACHINES,
            lambda machine_id, kv, _: index.set_machine(
                machine_id, None if kv is None else kv.value
            ),
            index.machines_present,
            lambda kvs: index.set_machines([(keys.last_segment(kv.key), kv.value) for kv in kvs]),
        ),
        keys.ALLOCATIONS: _Sink(
            keys.ALLOCATIONS, index.set_allocation, index.records_present, index.set_allocations
        ),
    }
