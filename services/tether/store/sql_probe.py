"""Cheap looks at the SQL store's SQLite file from the event loop, for what every process polls."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from tether.store.base import prefix_end
from tether.store.sql_tables import LEASES_SCHEMA, SQLITE_BUSY_CODES, attach_leases

# The SQL backend's tables (store/sql.py); a wrong name fails every look, loudly.
_REVISION = "SELECT revision, compacted FROM tether_meta WHERE id = 1"
_EXPIRED = f"SELECT id FROM {LEASES_SCHEMA}.tether_leases WHERE expires_at <= ? LIMIT ?"
_NEXT_EXPIRY = f"SELECT min(expires_at) FROM {LEASES_SCHEMA}.tether_leases WHERE expires_at > ?"
_UNTOUCHED = (
    # `+key`: scan the few newest revisions by the primary key, not every key under the prefix.
    "SELECT revision, compacted, EXISTS (SELECT 1 FROM tether_events"
    " WHERE revision >= ?1 AND +key >= ?2 AND (?3 IS NULL OR +key < ?3))"
    " FROM tether_meta WHERE id = 1"
)

T = TypeVar("T")


class Housekeeping(NamedTuple):
    """What the store's maintenance must do: the leases that have expired (at most a batch),
    and the revision and compaction point it decides compaction by; and when the next lease
    that has not expired will (a time.time(); None without one)."""

    expired: list[int]
    revision: int
    compacted: int
    next_expiry: float | None


class ProbeBusy(Exception):
    """The file was locked for the moment (a crashed writer's recovery, say): read the slow way."""


class SqliteProbe:
    """Reads on a connection of its own that never waits for a lock.

    Every process polls its store: for other processes' writes fifty times a second while it
    watches, and for expired leases when one is due. A pooled SQLAlchemy read transaction in
    a worker thread costs a millisecond and more of CPU (an idle region of 15 processes spent 1.3
    cores on them); a look here costs microseconds, and SQLite's data_version says whether there
    is anything to read at all.
    """

    def __init__(self, path: Path) -> None:
        self._connection = sqlite3.connect(
            path, timeout=0, isolation_level=None, check_same_thread=False
        )
        self._data_version: int | None = None
        self._path = path
        self._leases_attached = False

    def revision_if_changed(self) -> int | None:
        """The store's revision, or None if no connection has committed since the last call."""
        ((version,),) = self._read("PRAGMA data_version")
        if version == self._data_version:
            return None
        ((revision, _compacted),) = self._read(_REVISION)
        self._data_version = version
        return int(revision)

    def housekeeping(self, now: float, batch: int) -> Housekeeping:
        if not self._leases_attached:
            # Attaching waits for no lock, but fails while one is held: then it is busy. The
            # store made the file, in WAL mode (setting the mode again would wait for a lock).
            self._busy_unless(lambda: attach_leases(self._connection, self._path, configure=False))
            self._leases_attached = True
        expired = [int(lease) for (lease,) in self._read(_EXPIRED, (now, batch))]
        ((revision, compacted),) = self._read(_REVISION)
        ((next_expiry,),) = self._read(_NEXT_EXPIRY, (now,))
        return Housekeeping(expired, int(revision), int(compacted), next_expiry)

    def untouched_until(self, prefix: str, start: int) -> int | None:
        """The store's revision if no event under `prefix` is at `start` or later, so that a
        watch from `start` has nothing to read up to it; None if one is, or if history from
        `start` on was compacted (the watch must read, and fail)."""
        end = prefix_end(prefix)
        ((revision, compacted, touched),) = self._read(
            _UNTOUCHED, (start, prefix.encode(), None if end == b"\0" else end)
        )
        if touched or start < compacted:
            return None
        return int(revision)

    def close(self) -> None:
        self._connection.close()

    def _read(self, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._busy_unless(lambda: self._connection.execute(sql, parameters).fetchall())

    @staticmethod
    def _busy_unless(action: Callable[[], T]) -> T:
        """`action()`, ProbeBusy if SQLite said the file was locked."""
        try:
            return action()
        except sqlite3.OperationalError as error:
            if error.sqlite_errorcode in SQLITE_BUSY_CODES:
                raise ProbeBusy(str(error)) from error
            raise
