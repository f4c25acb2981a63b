"""Committing new allocation records with one optimistic-concurrency transaction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tether.allocator.index import AllocationIndex
from tether.model import Allocation, to_json
from tether.store import Get, Put, RangeResult, Store, key_missing, keys, mod_revision_is


@dataclass(frozen=True, slots=True)
class Change:
    """A new allocation record for a machine, based on the record at `revision` (0: none)."""

    revision: int
    allocation: Allocation


async def commit(store: Store, index: AllocationIndex, changes: Mapping[str, Change]) -> bool:
    """Writes every change if no record changed since its base revision; returns whether it did.

    Either way `index` learns the outcome: the records written, or, after a conflict, the
    current records of the changed machines, read in the same transaction, so that the next
    attempt starts from what the store holds.
    """
    compares = [
        mod_revision_is(keys.allocation(machine_id), change.revision)
        if change.revision
        else key_missing(keys.allocation(machine_id))
        for machine_id, change in changes.items()
    ]
    puts = [
        Put(keys.allocation(machine_id), to_json(change.allocation))
        for machine_id, change in changes.items()
    ]
    reads = [Get(keys.allocation(machine_id)) for machine_id in changes]
    result = await store.txn(compares, puts, reads)
    if result.succeeded:
        index.record_commit(
            {machine_id: change.allocation for machine_id, change in changes.items()},
            result.revision,
        )
        return True
    for machine_id, read in zip(changes, result.results, strict=True):
        assert isinstance(read, RangeResult)
        index.set_allocation(machine_id, read.kvs[0] if read.kvs else None, result.revision)
    return False
