"""Committing allocation records with one optimistic-concurrency transaction."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from tether.allocator.index import AllocationIndex
from tether.store import (
    Get,
    KeyValue,
    Put,
    RangeResult,
    Store,
    key_missing,
    keys,
    mod_revision_is,
)


@dataclass(frozen=True, slots=True)
class Change:
    """A new allocation record for a row, based on the record at `revision` (0: none)."""

    revision: int
    record: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a commit did: on a conflict, the records and fences as the store holds them now."""

    succeeded: bool
    revision: int
    records: dict[int, KeyValue | None] = field(default_factory=dict)
    fences: dict[str, int] = field(default_factory=dict)
    """Entitlement -> its quota fence's mod revision (0: none yet)."""


def encode(record: Mapping[str, Any]) -> bytes:
    """An allocation record as stored: the JSON of `tether.model.Allocation`."""
    return orjson.dumps(record)


async def commit(
    store: Store,
    index: AllocationIndex,
    changes: Mapping[int, Change],
    fences: Mapping[str, int],
    writer: str,
    *,
    tentative: bool = False,
) -> Outcome:
    """Writes every change if no record changed since its base revision and no quota fence of
    `fences` (entitlement -> the fence revision the plan saw) moved; bumps those fences.

    On success the index holds the records written (`tentative`: it shows them already and
    learns only the new revision). On a conflict the index is unchanged and the outcome carries
    what the store holds, read in the same transaction.
    """
    record_keys = {row: keys.allocation(index.ids[row]) for row in changes}
    fence_keys = {name: keys.quota_fence(name) for name in fences}
    compares = [
        mod_revision_is(record_keys[row], change.revision)
        if change.revision
        else key_missing(record_keys[row])
        for row, change in changes.items()
    ]
    compares += [
        mod_revision_is(fence_keys[name], revision) if revision else key_missing(fence_keys[name])
        for name, revision in fences.items()
    ]
    puts = [Put(record_keys[row], encode(change.record)) for row, change in changes.items()]
    puts += [Put(key, writer.encode()) for key in fence_keys.values()]
    reads = [Get(key) for key in (*record_keys.values(), *fence_keys.values())]
    result = await store.txn(compares, puts, reads)
    if result.succeeded:
        index.record_commit(
            {row: change.record for row, change in changes.items()}, result.revision
        )
        return Outcome(True, result.revision)
    current: list[KeyValue | None] = []
    for read in result.results:
        assert isinstance(read, RangeResult)
        current.append(read.kvs[0] if read.kvs else None)
    records = dict(zip(changes, current[: len(changes)], strict=True))
    fenced = {
        name: kv.mod_revision if kv else 0
        for name, kv in zip(fences, current[len(changes) :], strict=True)
    }
    return Outcome(False, result.revision, records, fenced)


def refresh(index: AllocationIndex, outcome: Outcome) -> None:
    """Applies the records a failed commit read back."""
    for row, kv in outcome.records.items():
        index.set_allocation(index.ids[row], kv, outcome.revision)
