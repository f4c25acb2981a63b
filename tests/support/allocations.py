"""Allocation records with their entries, written as an allocator writes them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tether.model import ZERO, Allocation, Resources, from_json, to_json
from tether.store import Put, Store, keys


async def put_allocation(
    store: Store, allocation: Allocation, tasks: Mapping[str, Resources] | None = None
) -> None:
    """Writes `allocation` and one entry per task (by task id `<entitlement>/<job>/<index>`) in
    one transaction; entries already stored for the machine stay."""
    writes = [Put(keys.allocation(allocation.machine), to_json(allocation))]
    for task_id, resources in (tasks or {}).items():
        entitlement, job, index = task_id.split("/")
        key = keys.allocation_entry(allocation.machine, entitlement, job, int(index))
        writes.append(Put(key, to_json(resources)))
    await store.txn([], writes)


@dataclass(frozen=True)
class Stored:
    """A machine's allocation record (None: missing) and its entries by task id, as read."""

    record: Allocation | None
    tasks: dict[str, Resources] = field(default_factory=dict)

    def used(self) -> Resources:
        return sum(self.tasks.values(), ZERO)


async def read_allocations(store: Store) -> dict[str, Stored]:
    """Every machine's allocation record and entries, read at one revision."""
    records: dict[str, Allocation | None] = {}
    tasks: dict[str, dict[str, Resources]] = {}
    for kv in (await store.range(keys.ALLOCATIONS)).kvs:
        machine_id, task_id = keys.split_allocation(kv.key)
        if task_id is None:
            records[machine_id] = from_json(Allocation, kv.value, stored=True)
        else:
            tasks.setdefault(machine_id, {})[task_id] = from_json(Resources, kv.value, stored=True)
            records.setdefault(machine_id, None)
    return {
        machine_id: Stored(record, tasks.get(machine_id, {}))
        for machine_id, record in records.items()
    }
