"""The allocator's in-memory index: machines, their allocation records, and entitlement usage."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import ValidationError

from tether.model import (
    ZERO,
    Allocation,
    AllocationEntry,
    Entitlement,
    InsufficientResources,
    Machine,
    Resources,
    from_json,
)
from tether.store import KeyValue

_log = logging.getLogger(__name__)

M = TypeVar("M", Machine, Allocation, Entitlement)


@dataclass(frozen=True, slots=True)
class AllocationRecord:
    """A machine's allocation record as of `revision`, its mod revision (0: no record yet)."""

    revision: int
    allocation: Allocation | None
    """None when the stored value is not a valid `Allocation`: nothing is placed there then."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A machine as placement sees it: the inventory and what is free on it now."""

    id: str
    machine: Machine
    free: Resources


class AllocationIndex:
    """Everything placement reads, kept current from the store one changed key at a time.

    Allocation records only move forward: a value older than the one held (a watch event
    arriving after the allocator's own commit or a refresh read) is ignored, so the revision and
    the content of a record always belong together, which the commit's compare relies on.
    """

    def __init__(self) -> None:
        self._machines: dict[str, Machine] = {}
        self._records: dict[str, AllocationRecord] = {}
        self._entitlements: dict[str, Entitlement] = {}
        # Derived from the above and updated with them.
        self._free: dict[str, Resources] = {}
        self._placements: dict[str, dict[int, str]] = {}
        self._usage: dict[str, Resources] = {}

    # --- updates ---------------------------------------------------------------------------

    def set_machine(self, machine_id: str, kv: KeyValue | None) -> None:
        """Applies the current value of `machines/<machine_id>` (None: deleted)."""
        machine = None if kv is None else _decode(Machine, kv)
        if machine is None:
            self._machines.pop(machine_id, None)
        else:
            self._machines[machine_id] = machine
        self._refresh_free(machine_id)

    def set_allocation(self, machine_id: str, kv: KeyValue | None, revision: int) -> None:
        """Applies `allocations/<machine_id>` as read at `revision` (kv None: it was missing)."""
        if kv is None:
            held = self._records.get(machine_id)
            if held is not None and held.revision < revision:
                self._replace_record(machine_id, None)
            return
        self._put_record(machine_id, AllocationRecord(kv.mod_revision, _decode(Allocation, kv)))

    def record_commit(self, allocations: Mapping[str, Allocation], revision: int) -> None:
        """Applies allocation records this allocator wrote itself in the transaction `revision`."""
        for machine_id, allocation in allocations.items():
            self._put_record(machine_id, AllocationRecord(revision, allocation))

    def set_entitlement(self, name: str, kv: KeyValue | None) -> None:
        """Applies the current value of `entitlements/<name>` (None: deleted)."""
        entitlement = None if kv is None else _decode(Entitlement, kv)
        if entitlement is None:
            self._entitlements.pop(name, None)
        else:
            self._entitlements[name] = entitlement

    # --- queries ---------------------------------------------------------------------------

    def candidates(self) -> Iterator[Candidate]:
        """Every machine of the inventory with its free resources, in no particular order."""
        for machine_id, machine in self._machines.items():
            yield Candidate(machine_id, machine, self._free[machine_id])

    def machine(self, machine_id: str) -> Machine | None:
        return self._machines.get(machine_id)

    def record(self, machine_id: str) -> AllocationRecord:
        """The machine's allocation record; an empty one at revision 0 when there is none."""
        return self._records.get(machine_id) or AllocationRecord(0, Allocation(machine=machine_id))

    def placements(self, job: str) -> dict[int, str]:
        """Task index -> machine for every task of `job` held in some allocation record."""
        return dict(self._placements.get(job, {}))

    def usage(self, entitlement: str) -> Resources:
        """The sum of the resources of every task of `entitlement` in any allocation record."""
        return self._usage.get(entitlement, ZERO)

    def entitlement(self, name: str) -> Entitlement | None:
        return self._entitlements.get(name)

    # --- derived data ----------------------------------------------------------------------

    def _put_record(self, machine_id: str, record: AllocationRecord) -> None:
        held = self._records.get(machine_id)
        if held is None or held.revision < record.revision:
            self._replace_record(machine_id, record)

    def _replace_record(self, machine_id: str, record: AllocationRecord | None) -> None:
        held = self._records.pop(machine_id, None)
        old, new = _tasks(held), _tasks(record)
        # Only what differs: most changes add or remove a few tasks of a full machine.
        for task_id, entry in old.items():
            if new.get(task_id) != entry:
                self._remove_entry(machine_id, entry)
        for task_id, entry in new.items():
            if old.get(task_id) != entry:
                self._placements.setdefault(entry.job, {})[entry.index] = machine_id
                self._usage[entry.entitlement] = self.usage(entry.entitlement) + entry.resources
        if record is not None:
            self._records[machine_id] = record
        self._refresh_free(machine_id)

    def _remove_entry(self, machine_id: str, entry: AllocationEntry) -> None:
        tasks = self._placements.get(entry.job, {})
        if tasks.get(entry.index) == machine_id:
            del tasks[entry.index]
            if not tasks:
                del self._placements[entry.job]
        # Through usage(): tasks without resources may leave after the usage reached zero.
        remaining = self.usage(entry.entitlement) - entry.resources
        if remaining.is_zero():
            self._usage.pop(entry.entitlement, None)
        else:
            self._usage[entry.entitlement] = remaining

    def _refresh_free(self, machine_id: str) -> None:
        machine = self._machines.get(machine_id)
        if machine is None:
            self._free.pop(machine_id, None)
            return
        allocation = self.record(machine_id).allocation
        if allocation is None:
            # Unknown content: placing anything there could over-commit it.
            self._free[machine_id] = ZERO
            return
        try:
            self._free[machine_id] = machine.capacity - allocation.used()
        except InsufficientResources:
            # The machine shrank below what it holds: it takes nothing until tasks leave.
            self._free[machine_id] = ZERO


def _tasks(record: AllocationRecord | None) -> Mapping[str, AllocationEntry]:
    if record is None or record.allocation is None:
        return {}
    return record.allocation.tasks


def _decode(model: type[M], kv: KeyValue) -> M | None:
    try:
        return from_json(model, kv.value, stored=True)
    except ValidationError as error:
        _log.warning("ignoring %s: not a valid %s: %s", kv.key, model.__name__, error)
        return None
