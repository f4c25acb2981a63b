"""The allocator's columnar index: every machine of the region as rows of numpy columns.

A row is a machine id. Columns (`columns.py`) hold its inventory from `machines/` (read by
`machines.py`) and its allocation record from `allocations/` (`records.py`); around them sit
the rows each entitlement owns and the free pool by MSB (`ownership.py`) and where every job's
tasks are held (`tasks.py`). This class applies the store's keys to them and is what placement
reads: the columns are read-only properties, every change goes through a method.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from tether.allocator.index.allocations import AllocationKeys
from tether.allocator.index.codes import ABSENT, NONE, Codes
from tether.allocator.index.columns import I32, I64, Columns
from tether.allocator.index.ephemeral import EphemeralRecords
from tether.allocator.index.machines import MachineReader, MachineRecords
from tether.allocator.index.ownership import IndexListener, Ownership
from tether.allocator.index.records import Header, Records
from tether.allocator.index.tasks import HeldTasks, Shape
from tether.allocator.index.topology import Topology
from tether.model import Entitlement
from tether.model.ephemeral import EphemeralResource
from tether.store import KeyValue


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


class AllocationIndex(Columns):
    """Every machine of the region in columns, kept current from the store key by key.

    The columns (`Columns`: `state`, `owner`, `capacity`, ...) are numpy arrays that placement
    reads directly, a million rows at a time, and that only the index's parts write: plain
    attributes, because a property in front of each would cost the planner a tenth of its time.
    """

    def __init__(self) -> None:
        super().__init__()
        self.topology = topology = Topology()
        self.dcs, self.msbs, self.racks = topology.dcs, topology.msbs, topology.racks
        self.msb_dc, self.rack_msb = topology.msb_dc, topology.rack_msb
        self.msb_racks = topology.msb_racks
        self.hardware, self.profiles = Codes(), Codes()
        self._ownership = Ownership(self)
        self.owners = self._ownership.owners
        reader = MachineReader(topology, self.hardware, self.profiles)
        self._machines = MachineRecords(self, self._ownership, reader)
        self._records = Records(self, self._ownership, self.profiles)
        self._tasks = HeldTasks(self)
        self._ephemeral = EphemeralRecords()
        self._allocations = AllocationKeys(self, self._records, self._tasks)
        self.in_flight: set[int] = set()
        """Rows with tasks placed tentatively whose commit is not answered yet: what the store
        holds of them says nothing of those tasks (`index.parsync` leaves them alone)."""

    @property
    def rows(self) -> int:
        """How many rows are in use (machines and allocation records ever seen)."""
        return len(self.ids)

    @property
    def listeners(self) -> list[IndexListener]:
        return self._ownership.listeners

    # --- machines ----------------------------------------------------------------------------

    def set_machine(self, machine_id: str, value: bytes | None) -> None:
        """Applies the current value of `machines/<machine_id>` (None: deleted)."""
        self._machines.set_machine(machine_id, value)

    def set_machines(self, machines: Sequence[tuple[str, bytes]]) -> None:
        """Applies a page of the machines' listing."""
        self._machines.set_machines(machines)

    # --- allocation records ------------------------------------------------------------------

    def set_allocation(self, name: str, kv: KeyValue | None, revision: int) -> None:
        """Applies the key `allocations/<name>` as of `revision` (kv None: deleted then)."""
        self._allocations.set_allocation(name, kv, revision)

    def set_allocations(self, kvs: Sequence[KeyValue]) -> None:
        """Applies a page of the allocations' listing."""
        self._allocations.set_allocations(kvs)

    def set_header(self, row: int, header: Header, revision: int) -> None:
        """Applies the row's allocation record as of `revision` (a committed one that changed
        no entries, or one read from the store)."""
        self._records.set_header(row, header, revision)

    def header(self, row: int) -> Header:
        return self._records.header(row)

    def header_json(self, row: int, header: Header | None = None) -> bytes:
        """The row's allocation record (or `header` for it) as stored: the JSON of
        `tether.model.Allocation`."""
        return self._records.encode(row, header)

    # --- committing --------------------------------------------------------------------------

    def shape(self, resources: Mapping[str, Any]) -> Shape:
        """The interned shape of `resources` (the JSON data of `Resources`)."""
        return self._tasks.shape(resources)

    def place_tentatively(
        self, job: str, placements: Mapping[int, int], shape: Shape, joined: Header | None
    ) -> Snapshot:
        """Shows a job's tasks about to be committed (task index -> row) to later plans,
        keeping the rows' revisions (the commit's base); `joined` is the record of the rows
        that move from the free pool into an entitlement (those whose owner is NONE). Returns
        what `roll_back` needs to undo it."""
        columns = self
        rows = np.unique(np.fromiter(placements.values(), np.intp, len(placements)))
        self.in_flight.update(rows.tolist())
        snapshot = Snapshot(
            rows,
            columns.revision[rows].copy(),
            columns.owner[rows].copy(),
            columns.target[rows].copy(),
            columns.idle_since[rows].copy(),
            job,
            placements,
        )
        if not placements:
            return snapshot
        if joined is not None:
            for row in rows[snapshot.owners == NONE].tolist():
                self._records.set_header(row, joined, int(columns.revision[row]))
        # A machine taking tasks is no longer idle.
        columns.idle_since[rows] = math.nan
        self._tasks.add_placed(job, placements, shape)
        return snapshot

    def confirm(self, rows: Iterable[int], revision: int) -> None:
        """The tentative records of `rows` were committed in transaction `revision`."""
        for row in rows:
            self.in_flight.discard(row)
            if self.revision[row] < revision:
                self.revision[row] = revision

    def roll_back(self, snapshot: Snapshot) -> None:
        """Undoes `place_tentatively`; the records too where the store's newer record did not
        replace them meanwhile."""
        self.in_flight.difference_update(snapshot.rows.tolist())
        for index, row in snapshot.placements.items():
            self._tasks.remove(row, snapshot.job, index)
        unchanged = np.flatnonzero(self.revision[snapshot.rows] == snapshot.revisions)
        for position in unchanged.tolist():
            header = (
                int(snapshot.owners[position]),
                int(snapshot.targets[position]),
                float(snapshot.idle[position]),
            )
            row, revision = int(snapshot.rows[position]), int(snapshot.revisions[position])
            self._records.set_header(row, header, revision)

    def remove(
        self, row: int, job: str, indexes: Iterable[int], header: Header, revision: int
    ) -> None:
        """Applies a committed release: the tasks left `row`, whose record is now `header`."""
        for index in indexes:
            self._tasks.remove(row, job, index)
        self._records.set_header(row, header, revision)

    # --- entitlements ------------------------------------------------------------------------

    def set_entitlement(self, name: str, value: bytes | None) -> None:
        """Applies the current value of `entitlements/<name>` (None: deleted)."""
        self._ownership.set_entitlement(name, value)

    def entitlement(self, name: str) -> Entitlement | None:
        return self._ownership.entitlements.get(name)

    def entitlement_names(self) -> list[str]:
        return list(self._ownership.entitlements)

    # --- ephemeral resources -------------------------------------------------------------------

    def set_ephemeral(self, name: str, value: bytes | None, revision: int) -> None:
        """Applies `resources/<entitlement>/<label>` as written at `revision` (None:
        deleted)."""
        self._ephemeral.set(name, value, revision)

    def ephemeral(self, entitlement: str, label: str) -> EphemeralResource | None:
        """The entitlement's ephemeral resource `label`, if it has one."""
        return self._ephemeral.records.get((entitlement, label))

    def ephemeral_revision(self, entitlement: str, label: str) -> int:
        """The revision the record of `ephemeral(entitlement, label)` was written at (0:
        none)."""
        return self._ephemeral.revisions.get((entitlement, label), 0)

    def expired_resources(self, now: datetime) -> list[tuple[str, str, int]]:
        """(entitlement, label, revision) of every ephemeral resource expired by `now`."""
        ephemeral = self._ephemeral
        return [
            (entitlement, label, ephemeral.revisions[(entitlement, label)])
            for (entitlement, label), record in ephemeral.records.items()
            if record.expired(now)
        ]

    def ephemeral_names(self) -> list[str]:
        return self._ephemeral.names()

    def extra_held(self, entitlement: str, name: str) -> Mapping[int, int]:
        """Row -> how much of the extra resource `name` the entitlement's tasks hold there (do
        not change the mapping)."""
        return self._tasks.extra_held.get((entitlement, name), {})

    def holders(self, entitlement: str, name: str) -> dict[int, list[str]]:
        """Row -> the tasks (`<entitlement>/<job>/<index>`) of the entitlement holding some of
        the extra resource `name` there."""
        return self._tasks.holders(entitlement, name)

    # --- listing -----------------------------------------------------------------------------

    def owned_rows(self, owner: int) -> set[int]:
        """The rows entitlement `owner` holds (do not change the set)."""
        return self._ownership.owned.get(owner, set())

    def owned_hardware(self, owner: int) -> dict[int, int]:
        """Hardware type code -> how many of the entitlement's machines are of it."""
        return dict(self._ownership.owned_hardware.get(owner, {}))

    def pool_msbs(self) -> list[int]:
        """The MSBs with free-pool rows."""
        return [msb for msb, rows in self._ownership.pool.items() if rows]

    def pool_rows(self, msb: int) -> set[int]:
        """The free-pool rows of `msb`, machines of every state (do not change the set)."""
        return self._ownership.pool.get(msb, set())

    def usage_of(self, entitlement: str) -> I64:
        """What the entitlement's tasks hold, summed over every allocation record."""
        return self._tasks.usage_of(entitlement)

    def held(self, job: str) -> dict[int, int]:
        """Task index -> row of every task of `job` held in some allocation entry."""
        return self._tasks.held(job)

    def holding(self, job: str, indexes: Sequence[int]) -> dict[int, list[int]]:
        """Row -> the tasks of `job` among `indexes` (every one held when empty) that it holds;
        a task held on two machines is listed under both."""
        return self._tasks.holding(job, indexes)

    def held_from(self, stopped: Mapping[str, int]) -> dict[int, tuple[I64, int]]:
        """Row -> (resources, tasks) that the tasks of each job `stopped` names, from the given
        task index on, hold there: what stopping them would free."""
        return self._tasks.held_from(stopped)

    def held_twice(self) -> dict[tuple[str, int], list[int]]:
        """(job, task index) -> the rows holding it, of every task held on more than one
        machine (two allocators placed it at once)."""
        return self._tasks.held_twice()

    def jobs_held(self) -> list[str]:
        """Handles of the jobs with a task held."""
        return list(self._tasks.jobs)

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
        columns = self
        names = [columns.ids[row] for row in np.flatnonzero(columns.revision[: self.rows])]
        return names + self._tasks.entry_names()
