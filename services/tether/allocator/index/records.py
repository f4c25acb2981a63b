"""Allocation records (`allocations/<machine>`) as the columns keep them: owner, target host
profile, idle since, revision, and whether the record and its entries can be read."""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime
from typing import Final

import orjson
from pydantic import ValidationError

from tether.allocator.index.codes import NONE, Codes
from tether.allocator.index.columns import Columns
from tether.allocator.index.ownership import Ownership
from tether.model import Allocation, from_json

_log = logging.getLogger(__name__)

Header = tuple[int, int, float]
"""An allocation record (`Allocation`) as the columns keep it: owner, target profile, idle
since."""
FREE: Final[Header] = (NONE, NONE, math.nan)
"""The record of a free-pool machine."""


def is_free(header: Header) -> bool:
    owner, target, idle = header
    return owner == NONE and target == NONE and math.isnan(idle)


class Records:
    """Reads, writes and applies allocation records."""

    def __init__(self, columns: Columns, ownership: Ownership, profiles: Codes) -> None:
        self._columns = columns
        self._ownership = ownership
        self._profiles = profiles
        self._unreadable: dict[int, set[str]] = {}
        """Rows whose allocation record (name "") or entries (task ids) cannot be read."""

    def header(self, row: int) -> Header:
        columns = self._columns
        return int(columns.owner[row]), int(columns.target[row]), float(columns.idle_since[row])

    def set_header(self, row: int, header: Header, revision: int) -> None:
        """Applies the row's allocation record as of `revision` (a committed one that changed
        no entries, or one read from the store)."""
        columns = self._columns
        owner, target, idle = header
        old_owner = int(columns.owner[row])
        columns.revision[row] = revision
        columns.target[row] = target
        columns.idle_since[row] = idle
        if owner != old_owner:
            self._ownership.change_owner(row, old_owner, owner)

    def apply(self, row: int, header: Header | None, revision: int) -> None:
        """Applies a record read from the store (None: unreadable, which keeps the machine out
        of placement until it is fixed)."""
        self.mark_readable(row, "", header is not None)
        if header is None:
            self._columns.revision[row] = revision
        else:
            self.set_header(row, header, revision)

    def mark_readable(self, row: int, name: str, readable: bool) -> None:
        """Records whether the row's record (name "") or entry `name` can be read: a row with
        anything unreadable takes no tasks until it is fixed."""
        unreadable = self._unreadable.get(row)
        if readable:
            if unreadable is not None:
                unreadable.discard(name)
                if not unreadable:
                    del self._unreadable[row]
                    self._columns.readable[row] = True
        else:
            self._unreadable.setdefault(row, set()).add(name)
            self._columns.readable[row] = False

    def decode(self, row: int, value: bytes) -> Header | None:
        machine_id = self._columns.ids[row]
        try:
            data = orjson.loads(value)
            owner, target, idle = data["entitlement"], data["host_profile"], data["idle_since"]
            if data.get("machine") != machine_id or not all(
                name is None or isinstance(name, str) for name in (owner, target, idle)
            ):
                raise ValueError("malformed")
            return (
                NONE if owner is None else self._ownership.owners.code(owner),
                NONE if target is None else self._profiles.code(target),
                math.nan if idle is None else datetime.fromisoformat(idle).timestamp(),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            try:
                from_json(Allocation, value, stored=True)
                reason = f"it names another machine than {machine_id}"
            except ValidationError as error:
                reason = str(error)
            # Unknown content: placing anything there could over-commit the machine.
            _log.warning("machine %s: unreadable allocation record: %s", machine_id, reason)
            return None

    def encode(self, row: int, header: Header | None = None) -> bytes:
        """The row's allocation record (or `header` for it) as stored: the JSON of
        `tether.model.Allocation`."""
        owner, target, idle = self.header(row) if header is None else header
        return orjson.dumps(
            {
                "machine": self._columns.ids[row],
                "entitlement": self._ownership.owners.name(owner),
                "host_profile": self._profiles.name(target),
                "idle_since": None
                if math.isnan(idle)
                else datetime.fromtimestamp(idle, UTC).isoformat(),
            }
        )
