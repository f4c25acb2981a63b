"""The allocation cache: per job signature, the machines its hard rules accept, kept current."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tether.allocator.index import IndexListener
from tether.allocator.rules.checks import Check, Rows, passes
from tether.allocator.rules.pipeline import Signature

_GOLDEN = np.uint64(2654435761)
"""Knuth's multiplicative hash: consecutive rows land far apart."""
_LOW_32 = np.uint64(0xFFFFFFFF)


def _replica_salt(replica: str) -> np.uint64:
    return np.uint64(zlib.crc32(replica.encode()))


def _salted(rows: Rows, salt: np.uint64) -> npt.NDArray[np.uint64]:
    """A hash of each row that differs per salt (mixed twice: a plain sum with the salt would
    only rotate one order)."""
    hashed: npt.NDArray[np.uint64] = ((rows.astype(np.uint64) ^ salt) * _GOLDEN) & _LOW_32
    hashed ^= hashed >> np.uint64(15)
    hashed = (hashed * _GOLDEN) & _LOW_32
    return hashed


@dataclass(slots=True)
class OwnedEntry:
    """The entitlement's machines that pass the signature's machine rules."""

    rules: Sequence[Check]
    rows: Rows
    joined: list[int] = field(default_factory=list)
    """Machines that joined the entitlement since, not yet checked against the rules."""

    def rows_array(self) -> Rows:
        if self.joined:
            # Checked together: one pass of the rules over many rows costs what one row does.
            joined = passes(self.rules, np.array(self.joined, np.intp))
            self.rows = np.concatenate([self.rows, joined])
            self.joined = []
        return self.rows


@dataclass(slots=True)
class PoolEntry:
    """Free-pool machines of one MSB that pass the signature's machine rules, best first.

    `start` skips rows known to have left the pool; rows that join the pool drop the entry.
    """

    rows: Rows
    scores: npt.NDArray[np.int64]
    """Per row: preference bits, then a bit for carrying the entitlement's host profile."""
    start: int = 0


class ChoiceCache(IndexListener):
    """Hard-rule results per job signature, updated as machines join and leave entitlements.

    Placement asks it for an entitlement's eligible machines and for the eligible free-pool
    machines of an MSB. A machine joining an entitlement is checked against that entitlement's
    cached signatures and appended; anything else that could change a result drops the entries
    it touches.
    """

    def __init__(self, replica: str = "") -> None:
        self._salt = _replica_salt(replica)
        """Orders alike free-pool machines differently in each replica (`pool_shares`)."""
        self._peers: list[np.uint64] = [self._salt]
        """The salts of every live replica: each prefers its own share of the free pool."""
        self._keys: dict[Signature, int] = {}
        self._owned: dict[int, OwnedEntry] = {}
        self._owned_by: dict[int, set[int]] = {}
        self._pool: dict[tuple[int, int], PoolEntry] = {}
        self._pool_by_msb: dict[int, set[int]] = {}
        self.reasons: dict[tuple[object, ...], tuple[float, str]] = {}
        """Why jobs of a signature and task size fit nowhere, with when that was found."""
        self.hits = 0
        self.misses = 0

    def key(self, signature: Signature) -> int:
        """A small number for the signature: hashing it once per plan, not once per lookup."""
        return self._keys.setdefault(signature, len(self._keys))

    def owned(
        self,
        key: int,
        owner: int,
        rules: Callable[[], Sequence[Check]],
        build: Callable[[], Rows],
    ) -> Rows:
        """The entitlement's machines that pass `rules` (asked for only when the entry is
        built), of those `build` lists."""
        entry = self._owned.get(key)
        if entry is None:
            self.misses += 1
            checks = rules()
            entry = self._owned[key] = OwnedEntry(checks, passes(checks, build()))
            self._owned_by.setdefault(owner, set()).add(key)
        else:
            self.hits += 1
        return entry.rows_array()

    def pool(
        self,
        key: int,
        msb: int,
        build: Callable[[], tuple[Rows, npt.NDArray[np.int64]]],
    ) -> PoolEntry:
        entry = self._pool.get((key, msb))
        if entry is None:
            self.misses += 1
            entry = self._pool[(key, msb)] = PoolEntry(*build())
            self._pool_by_msb.setdefault(msb, set()).add(key)
        else:
            self.hits += 1
        return entry

    def pool_shares(self, rows: Rows) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.uint64]]:
        """For free-pool rows: this replica's rank among the replicas for each (0: the row is in
        its own share, where its hash is highest; 1: it is the row's second choice, ...), and an
        order within a rank. Each share is a random sample of the pool, with its best machines.
        A replica takes its own share in an order of its own, and another's share from the end
        of the owner's order: replicas that ran out pull from disjoint second-choice parts, and
        the owner's next machines last."""
        hashes = np.stack([_salted(rows, peer) for peer in self._peers])
        mine = hashes[self._peers.index(self._salt)]
        rank: npt.NDArray[np.intp] = (hashes > mine).sum(axis=0)
        return rank, np.where(rank == 0, mine, ~hashes.max(axis=0))

    def set_replicas(self, replicas: Iterable[str]) -> None:
        """The live replicas changed: the free pool is shared out among them anew."""
        peers = sorted({_replica_salt(replica) for replica in replicas} | {self._salt})
        if peers != self._peers:
            self._peers = peers
            self._pool.clear()
            self._pool_by_msb.clear()

    @property
    def hit_ratio(self) -> float:
        asked = self.hits + self.misses
        return self.hits / asked if asked else 0.0

    # --- IndexListener -----------------------------------------------------------------------

    def joined(self, owner: int, row: int) -> None:
        for key in self._owned_by.get(owner, ()):
            self._owned[key].joined.append(row)

    def owner_changed(self, owner: int) -> None:
        for key in self._owned_by.pop(owner, set()):
            del self._owned[key]

    def pool_changed(self, msb: int) -> None:
        for key in self._pool_by_msb.pop(msb, set()):
            self._pool.pop((key, msb), None)
