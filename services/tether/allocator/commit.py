"""Committing allocation records and entries with one optimistic-concurrency transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tether.store import (
    Delete,
    Get,
    Op,
    Put,
    RangeResult,
    Store,
    key_missing,
    keys,
    mod_revision_is,
)


@dataclass(frozen=True, slots=True)
class Write:
    """What a transaction changes on one machine: its allocation record, based on the record
    at `revision` (0: none), and the allocation entries it adds (key, value) and removes."""

    revision: int
    record: bytes
    added: Sequence[tuple[str, bytes]] = ()
    removed: Sequence[str] = ()


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a commit did: its revision (on a conflict, the store's then), and on a conflict
    the quota fences as the store holds them."""

    succeeded: bool
    revision: int
    fences: dict[str, int] = field(default_factory=dict)
    """Entitlement -> its quota fence's mod revision (0: none yet)."""


async def commit(
    store: Store,
    machine_ids: Sequence[str],
    writes: Mapping[int, Write],
    fences: Mapping[str, int],
    writer: str,
) -> Outcome:
    """Applies every write (by row of `machine_ids`) if no allocation record changed since its
    base revision and no quota fence of `fences` (entitlement -> the fence revision the plan
    saw) moved; bumps those fences. The index is the caller's to update."""
    compares = []
    ops: list[Op] = []
    for row, write in writes.items():
        record_key = keys.allocation(machine_ids[row])
        compares.append(
            mod_revision_is(record_key, write.revision)
            if write.revision
            else key_missing(record_key)
        )
        ops.append(Put(record_key, write.record))
        ops += [Put(key, value) for key, value in write.added]
        ops += [Delete(key) for key in write.removed]
    fence_keys = {name: keys.quota_fence(name) for name in fences}
    compares += [
        mod_revision_is(fence_keys[name], revision) if revision else key_missing(fence_keys[name])
        for name, revision in fences.items()
    ]
    ops += [Put(key, writer.encode()) for key in fence_keys.values()]
    # Only the fences are read back on a conflict: the records come through the feed.
    result = await store.txn(compares, ops, [Get(key) for key in fence_keys.values()])
    if result.succeeded:
        return Outcome(True, result.revision)
    fenced = {}
    for name, read in zip(fences, result.results, strict=True):
        assert isinstance(read, RangeResult)
        fenced[name] = read.kvs[0].mod_revision if read.kvs else 0
    return Outcome(False, result.revision, fenced)
