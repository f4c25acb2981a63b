"""Committing allocation records with one optimistic-concurrency transaction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from tether.allocator.index import AllocationIndex
from tether.store import Get, Put, RangeResult, Store, key_missing, keys, mod_revision_is


@dataclass(frozen=True, slots=True)
class Change:
    """A new allocation record for a row, based on the record at `revision` (0: none)."""

    revision: int
    record: dict[str, Any]


def encode(record: Mapping[str, Any]) -> bytes:
    """An allocation record as stored: the JSON of `tether.model.Allocation`."""
    return orjson.dumps(record)


async def commit(store: Store, index: AllocationIndex, changes: Mapping[int, Change]) -> bool:
    """Writes every change if no record changed since its base revision; returns whether it did.

    Either way `index` learns the outcome: the records written, or, after a conflict, the
    current records of the changed machines, read in the same transaction, so that the next
    attempt starts from what the store holds.
    """
    values = {row: encode(change.record) for row, change in changes.items()}
    machine_keys = {row: keys.allocation(index.ids[row]) for row in changes}
    compares = [
        mod_revision_is(machine_keys[row], change.revision)
        if change.revision
        else key_missing(machine_keys[row])
        for row, change in changes.items()
    ]
    puts = [Put(machine_keys[row], value) for row, value in values.items()]
    reads = [Get(machine_keys[row]) for row in changes]
    result = await store.txn(compares, puts, reads)
    if result.succeeded:
        index.record_commit(
            {row: change.record for row, change in changes.items()}, result.revision
        )
        return True
    for row, read in zip(changes, result.results, strict=True):
        assert isinstance(read, RangeResult)
        index.set_allocation(index.ids[row], read.kvs[0] if read.kvs else None, result.revision)
    return False
