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
    guards: dict[str, int] = field(default_factory=dict)
    """Key of each guard -> its mod revision (0: missing)."""


async def commit(
    store: Store,
    machine_ids: Sequence[str],
    writes: Mapping[int, Write],
    fences: Mapping[str, int],
    writer: str,
    guards: Mapping[str, int] | None = None,
) -> Outcome:
    """Applies every write (by row of `machine_ids`) if no allocation record changed since its
    base revision, no quota fence of `fences` (entitlement -> the fence revision the plan
    saw) moved and every key of `guards` (the ephemeral resources the plans counted on) is
    still at its revision; bumps those fences. The index is the caller's to update."""
    guards = guards or {}
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
    compares += [mod_revision_is(key, revision) for key, revision in guards.items()]
    # Only the fences and guards are read back on a conflict: the records come through the
    # feed.
    read_back = [*fence_keys.values(), *guards]
    result = await store.txn(compares, ops, [Get(key) for key in read_back])
    if result.succeeded:
        return Outcome(True, result.revision)
    revisions = []
    for read in result.results:
        assert isinstance(read, RangeResult)
        revisions.append(read.kvs[0].mod_revision if read.kvs else 0)
    fenced = dict(zip(fences, revisions[: len(fences)], strict=True))
    guarded = dict(zip(guards, revisions[len(fences) :], strict=True))
    return Outcome(False, result.revision, fenced, guarded)
