"""What each scheduler shard holds, counted from the store's keys as they change (no I/O here)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import orjson
from pydantic import ValidationError

from tether.model import Allocation, from_json
from tether.store import KeyValue, keys

_log = logging.getLogger(__name__)

Kind = Literal["jobs", "tasks", "operations", "machines"]
KINDS: Final[tuple[Kind, ...]] = ("jobs", "tasks", "operations", "machines")


@dataclass(frozen=True, slots=True)
class Held:
    """What one shard holds: its entitlements (by name) and their jobs, tasks, task
    operations and owned machines."""

    entitlements: tuple[str, ...] = ()
    jobs: int = 0
    tasks: int = 0
    operations: int = 0
    machines: int = 0


def mapped_shard(kv: KeyValue) -> str:
    """The shard a `shards/map/<entitlement>` key names."""
    return kv.value.decode().strip()


class ShardTally:
    """Counts per entitlement and the shard map, with each shard's totals kept in step.

    A change of a count moves its entitlement's shard total by the same amount, and a move in
    the shard map carries the entitlement's counts from one shard to the other, so reading a
    shard's totals costs no counting. A listing replaces a kind's counts (or the map) whole and
    sums the totals anew, so a listing again after a compaction cannot count anything twice.
    """

    def __init__(self) -> None:
        self._shard_of: dict[str, str] = {}
        self._members: dict[str, set[str]] = {}
        self._by_entitlement: dict[Kind, Counter[str]] = {kind: Counter() for kind in KINDS}
        self._by_shard: dict[Kind, Counter[str]] = {kind: Counter() for kind in KINDS}

    def held(self, shard: str) -> Held:
        totals = self._by_shard
        return Held(
            tuple(sorted(self._members.get(shard, ()))),
            totals["jobs"][shard],
            totals["tasks"][shard],
            totals["operations"][shard],
            totals["machines"][shard],
        )

    def add(self, kind: Kind, entitlement: str, delta: int) -> None:
        """`delta` more (or fewer) of `kind` for the entitlement."""
        counts = self._by_entitlement[kind]
        counts[entitlement] += delta
        if not counts[entitlement]:
            # Entitlements whose jobs all went must not accumulate.
            del counts[entitlement]
        shard = self._shard_of.get(entitlement)
        if shard is not None:
            self._by_shard[kind][shard] += delta

    def assign(self, entitlement: str, shard: str | None) -> None:
        """The entitlement is now on `shard` (None: in no shard's map entry)."""
        old = self._shard_of.get(entitlement)
        if old == shard:
            return
        if old is not None:
            self._carry(entitlement, old, -1)
            self._members[old].discard(entitlement)
            del self._shard_of[entitlement]
        if shard is not None:
            self._carry(entitlement, shard, 1)
            self._members.setdefault(shard, set()).add(entitlement)
            self._shard_of[entitlement] = shard

    def replace_counts(self, kind: Kind, counts: Counter[str]) -> None:
        """Every entitlement's count of `kind`, from a listing: what was counted before goes."""
        self._by_entitlement[kind] = +counts
        self._by_shard[kind] = self._summed(kind)

    def replace_map(self, shard_of: dict[str, str]) -> None:
        """The whole shard map, from a listing."""
        self._shard_of = dict(shard_of)
        self._members = {}
        for entitlement, shard in self._shard_of.items():
            self._members.setdefault(shard, set()).add(entitlement)
        self._by_shard = {kind: self._summed(kind) for kind in KINDS}

    def _carry(self, entitlement: str, shard: str, sign: int) -> None:
        for kind in KINDS:
            count = self._by_entitlement[kind][entitlement]
            if count:
                self._by_shard[kind][shard] += sign * count

    def _summed(self, kind: Kind) -> Counter[str]:
        totals: Counter[str] = Counter()
        for entitlement, count in self._by_entitlement[kind].items():
            shard = self._shard_of.get(entitlement)
            if shard is not None:
                totals[shard] += count
        return totals


class KeyCount:
    """Feed sink: counts the keys under `prefix` (jobs, tasks or operations) per entitlement,
    the key's first segment.

    It keeps no keys. The watch delivers each revision once, from the one after the listing's,
    so a put of version 1 is a key created since, any other put rewrites a counted key, and a
    delete removes one (the store reports deletions of existing keys only).
    """

    def __init__(self, prefix: str, kind: Kind, tally: ShardTally) -> None:
        self._start = len(prefix)
        self._kind = kind
        self._tally = tally
        self._listing: Counter[str] = Counter()

    def _entitlement(self, key: str) -> str:
        return key[self._start :].partition("/")[0]

    def begin_listing(self) -> None:
        self._listing = Counter()

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        self._listing.update(self._entitlement(kv.key) for kv in kvs)

    def end_listing(self, revision: int) -> None:
        self._tally.replace_counts(self._kind, self._listing)
        self._listing = Counter()

    def put(self, kv: KeyValue) -> None:
        if kv.version == 1:
            self._tally.add(self._kind, self._entitlement(kv.key), 1)

    def delete(self, key: str, revision: int) -> None:
        self._tally.add(self._kind, self._entitlement(key), -1)


class OwnedMachines:
    """Feed sink over `allocations/`: the machines each entitlement owns, from the machines'
    allocation records (their task entries are passed over).

    A record's put carries its new owner only, so the owner of every owned machine is kept to
    know whose count a change or a deletion lowers.
    """

    def __init__(self, tally: ShardTally) -> None:
        self._tally = tally
        self._owner: dict[str, str] = {}
        self._listing: dict[str, str] = {}

    def begin_listing(self) -> None:
        self._listing = {}

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        for kv in kvs:
            machine, task = keys.split_allocation(kv.key)
            if task is None and (owner := _owner(machine, kv.value)) is not None:
                self._listing[machine] = owner

    def end_listing(self, revision: int) -> None:
        self._owner, self._listing = self._listing, {}
        self._tally.replace_counts("machines", Counter(self._owner.values()))

    def put(self, kv: KeyValue) -> None:
        machine, task = keys.split_allocation(kv.key)
        if task is None:
            self._set(machine, _owner(machine, kv.value))

    def delete(self, key: str, revision: int) -> None:
        machine, task = keys.split_allocation(key)
        if task is None:
            self._set(machine, None)

    def _set(self, machine: str, owner: str | None) -> None:
        old = self._owner.get(machine)
        if old == owner:
            return
        if old is not None:
            self._tally.add("machines", old, -1)
            del self._owner[machine]
        if owner is not None:
            self._tally.add("machines", owner, 1)
            self._owner[machine] = owner


def _owner(machine: str, value: bytes) -> str | None:
    """The entitlement an allocation record gives its machine to (None: the free pool, or a
    record that cannot be read, which the log names)."""
    try:
        owner = orjson.loads(value)["entitlement"]
        if owner is None or isinstance(owner, str):
            return owner
    except (ValueError, KeyError, TypeError):
        pass
    try:
        from_json(Allocation, value, stored=True)
        reason = "its entitlement is not a name"
    except ValidationError as error:
        reason = str(error)
    _log.warning(
        "machine %s: unreadable allocation record, counted as unowned: %s", machine, reason
    )
    return None


class ShardMap:
    """Feed sink over `shards/map/`: which shard each entitlement is on."""

    def __init__(self, tally: ShardTally) -> None:
        self._tally = tally
        self._listing: dict[str, str] = {}

    def begin_listing(self) -> None:
        self._listing = {}

    def put_page(self, kvs: Sequence[KeyValue]) -> None:
        self._listing.update((keys.last_segment(kv.key), mapped_shard(kv)) for kv in kvs)

    def end_listing(self, revision: int) -> None:
        self._tally.replace_map(self._listing)
        self._listing = {}

    def put(self, kv: KeyValue) -> None:
        self._tally.assign(keys.last_segment(kv.key), mapped_shard(kv))

    def delete(self, key: str, revision: int) -> None:
        self._tally.assign(keys.last_segment(key), None)
