"""Which entitlement holds each machine: the rows each one owns and of which hardware types,
the free pool by MSB, the entitlements' records, and the listeners told of changes."""

from __future__ import annotations

import logging
from collections import Counter

from pydantic import ValidationError

from tether.allocator.index.codes import ABSENT, NONE, Codes
from tether.allocator.index.columns import Columns
from tether.model import Entitlement, from_json

_log = logging.getLogger(__name__)


class IndexListener:
    """Told when the index changes in ways a cache of machine choices depends on."""

    def joined(self, owner: int, row: int) -> None:
        """`row` was added to entitlement `owner` (its static properties unchanged)."""

    def owner_changed(self, owner: int) -> None:
        """A machine of entitlement `owner` left it or changed its static properties."""

    def pool_changed(self, msb: int) -> None:
        """A machine joined the free pool of `msb`, or one of its machines changed."""


class Ownership:
    """The sets placement starts from, kept with the owner column: a placement reads a few
    thousand rows (its entitlement's, a few MSBs of the pool) instead of a million."""

    def __init__(self, columns: Columns) -> None:
        self._columns = columns
        self.owners = Codes()
        self.owned: dict[int, set[int]] = {}
        self.pool: dict[int, set[int]] = {}
        """Rows of the free pool by MSB, machines of every state (placement filters by state)."""
        self.owned_hardware: dict[int, Counter[int]] = {}
        self.entitlements: dict[str, Entitlement] = {}
        self.listeners: list[IndexListener] = []

    def change_owner(self, row: int, old: int, new: int) -> None:
        columns = self._columns
        columns.owner[row] = new
        hardware = int(columns.hw[row])
        if old != NONE:
            self.owned[old].discard(row)
            self.owned_hardware[old][hardware] -= 1
            for listener in self.listeners:
                listener.owner_changed(old)
        if new != NONE:
            self.owned.setdefault(new, set()).add(row)
            self.owned_hardware.setdefault(new, Counter())[hardware] += 1
            msb = int(columns.msb[row])
            if msb != NONE:
                self.pool.get(msb, set()).discard(row)
            for listener in self.listeners:
                listener.joined(new, row)
        else:
            self.place_in_pool(row, int(columns.msb[row]))

    def machine_changed(self, row: int, old_msb: int, old_hardware: int) -> None:
        """The row's machine record changed (its columns hold the new one)."""
        owner = int(self._columns.owner[row])
        if owner == NONE:
            self.place_in_pool(row, old_msb)
            return
        hardware = int(self._columns.hw[row])
        if self._columns.state[row] != ABSENT and old_hardware != hardware:
            self.owned_hardware[owner][old_hardware] -= 1
            self.owned_hardware[owner][hardware] += 1
        for listener in self.listeners:
            listener.owner_changed(owner)

    def place_in_pool(self, row: int, old_msb: int) -> None:
        """Moves a free row to its MSB's pool set (from `old_msb`'s, if it moved)."""
        columns = self._columns
        if old_msb != NONE:
            self.pool.get(old_msb, set()).discard(row)
        if columns.state[row] != ABSENT and columns.owner[row] == NONE:
            msb = int(columns.msb[row])
            self.pool.setdefault(msb, set()).add(row)
            for listener in self.listeners:
                listener.pool_changed(msb)

    def add_new_to_pool(self, rows: list[int], msbs: list[int]) -> None:
        """Adds rows just read from a listing, never seen before, to their MSBs' pool sets."""
        for row, msb in zip(rows, msbs, strict=True):
            self.pool.setdefault(msb, set()).add(row)
        for msb in set(msbs):
            for listener in self.listeners:
                listener.pool_changed(msb)

    def set_entitlement(self, name: str, value: bytes | None) -> None:
        """Applies the current value of `entitlements/<name>` (None: deleted)."""
        entitlement = None
        if value is not None:
            try:
                entitlement = from_json(Entitlement, value, stored=True)
            except ValidationError as error:
                _log.warning("ignoring entitlement %s: not a valid Entitlement: %s", name, error)
        if entitlement is None:
            self.entitlements.pop(name, None)
        else:
            self.entitlements[name] = entitlement
            self.owners.code(name)
        for listener in self.listeners:
            listener.owner_changed(self.owners.find(name))
