"""The embedded store's tables, its engine, and the rows it reads and writes."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from tether.store.base import EventType, KeyValue, Put, StoreError, WatchEvent, prefix_end

PUT_EVENT, DELETE_EVENT = 0, 1
"""The `type` of an event row."""

metadata = sa.MetaData()
meta_table = sa.Table(
    "tether_meta",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("revision", sa.BigInteger, nullable=False),
    sa.Column("compacted", sa.BigInteger, nullable=False),
)
kv_table = sa.Table(
    "tether_kv",
    metadata,
    # Keys are bytes so that ordering is bytewise on every database, as in etcd.
    sa.Column("key", sa.LargeBinary, primary_key=True),
    sa.Column("value", sa.LargeBinary, nullable=False),
    sa.Column("create_revision", sa.BigInteger, nullable=False),
    sa.Column("mod_revision", sa.BigInteger, nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("lease", sa.BigInteger, nullable=False, index=True),
)
events_table = sa.Table(
    "tether_events",
    metadata,
    sa.Column("revision", sa.BigInteger, primary_key=True),
    sa.Column("sub", sa.Integer, primary_key=True),  # order of the change within its revision
    sa.Column("key", sa.LargeBinary, nullable=False),
    sa.Column("type", sa.SmallInteger, nullable=False),
    sa.Column("value", sa.LargeBinary, nullable=False),
    sa.Column("create_revision", sa.BigInteger, nullable=False),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("lease", sa.BigInteger, nullable=False),
    sa.Index("tether_events_key_revision", "key", "revision", unique=True),
)
LEASES_SCHEMA = "leases"
"""Where the leases table lives. On SQLite, a database file of its own (`leases_path`),
attached to every connection: a renewal commits to that file alone, and the processes that
watch the main file for commits (store/sql_wake.py) are not woken by every renewal of every
lease in the region, which was most of what an idle region did. Elsewhere, the default
schema."""
leases_table = sa.Table(
    "tether_leases",
    metadata,
    sa.Column("id", sa.BigInteger, primary_key=True),
    sa.Column("ttl", sa.Integer, nullable=False),
    sa.Column("expires_at", sa.Float, nullable=False, index=True),
    schema=LEASES_SCHEMA,
)


def under(column: sa.ColumnElement[bytes], prefix: str) -> sa.ColumnElement[bool]:
    """`column` holds a key under `prefix`."""
    low, high = prefix.encode(), prefix_end(prefix)
    if high == b"\0":
        return column >= low
    return sa.and_(column >= low, column < high)


def kv_from_row(row: Any) -> KeyValue:
    return KeyValue(
        key=row.key.decode(),
        value=bytes(row.value),
        create_revision=row.create_revision,
        mod_revision=row.mod_revision,
        version=row.version,
        lease=row.lease,
    )


def event_from_row(row: Any) -> WatchEvent:
    if row.type == DELETE_EVENT:
        return WatchEvent(EventType.DELETE, KeyValue(row.key.decode(), b"", 0, row.revision, 0, 0))
    kv = KeyValue(
        row.key.decode(),
        bytes(row.value),
        row.create_revision,
        row.revision,
        row.version,
        row.lease,
    )
    return WatchEvent(EventType.PUT, kv)


def sqlite_path(url: str) -> Path | None:
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    if parsed.database == ":memory:":
        raise StoreError("an in-memory SQLite store cannot be shared; give a file path")
    return Path(parsed.database)


def leases_path(path: Path) -> Path:
    """The leases' SQLite file of the store in `path`: in a directory of its own, which the
    watch on the main file's directory does not see into."""
    return path.parent / f"{path.name}-leases" / "leases.db"


SQLITE_BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
"""The error codes of an SQLite file another connection has locked."""
WAL_SWITCH_TIMEOUT_S = 60.0
"""How long a connection keeps trying to put its database in WAL mode (as `busy_timeout`)."""


def use_wal(cursor: Any, schema: str) -> None:
    """Puts the database `schema` of a connection in WAL mode.

    The switch takes an exclusive lock, and SQLite answers a contended switch with "database is
    locked" at once, skipping its busy wait: processes that open a new store together race
    here. So the switch is retried, briefly apart, until it goes through.
    """
    deadline = time.monotonic() + WAL_SWITCH_TIMEOUT_S
    while True:
        try:
            cursor.execute(f"PRAGMA {schema}.journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode not in SQLITE_BUSY_CODES or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def attach_leases(dbapi_connection: Any, path: Path, *, configure: bool = True) -> None:
    """Attaches the leases' file to a SQLite connection (creating it), and unless told not to
    (a connection that only reads), puts it in WAL mode."""
    leases = leases_path(path)
    leases.parent.mkdir(parents=True, exist_ok=True)
    cursor = dbapi_connection.cursor()
    cursor.execute(f"ATTACH DATABASE ? AS {LEASES_SCHEMA}", (str(leases),))
    if configure:
        use_wal(cursor, LEASES_SCHEMA)
        cursor.execute(f"PRAGMA {LEASES_SCHEMA}.synchronous=NORMAL")
    cursor.close()


def move_old_leases(conn: Connection) -> None:
    """Moves the leases of a SQLite store written before they had a file of their own."""
    if sa.inspect(conn).has_table(leases_table.name, schema="main"):
        conn.exec_driver_sql(
            f"INSERT OR IGNORE INTO {LEASES_SCHEMA}.{leases_table.name} "
            f"SELECT id, ttl, expires_at FROM main.{leases_table.name}"
        )
        conn.exec_driver_sql(f"DROP TABLE main.{leases_table.name}")


def make_engine(url: str, path: Path | None) -> Engine:
    """The engine for `url`, whose SQLite file is `path` (None: not SQLite)."""
    if path is None:
        parsed = sa.engine.make_url(url)
        if parsed.drivername == "postgresql":
            # The driver `tether[postgresql]` installs (SQLAlchemy's default is psycopg2).
            parsed = parsed.set(drivername="postgresql+psycopg")
        engine = sa.create_engine(parsed, pool_size=8, pool_pre_ping=True)
        return engine.execution_options(schema_translate_map={LEASES_SCHEMA: None})
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        url, connect_args={"check_same_thread": False, "timeout": 60}, pool_size=8
    )

    @sa.event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver so that writes can BEGIN IMMEDIATE.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        use_wal(cursor, "main")
        # NORMAL in WAL mode loses nothing when a process crashes (only on power loss).
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()
        attach_leases(dbapi_connection, path)

    @sa.event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        write = connection.get_execution_options().get("tether_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


class RevisionWriter:
    """Applies the changes of one transaction under one new revision, etcd-style.

    Puts are buffered and written in bulk (one read of the existing rows, one executemany per
    table); the buffer is flushed before any other operation so later ones see earlier writes.
    """

    def __init__(self, conn: Connection, revision: int) -> None:
        self._conn = conn
        self.revision = revision
        self._events: list[dict[str, Any]] = []
        self._puts: list[Put] = []

    @property
    def changed(self) -> bool:
        return bool(self._events or self._puts)

    def _event(
        self, key: bytes, type_: int, value: bytes, create: int, version: int, lease: int
    ) -> None:
        self._events.append(
            {
                "revision": self.revision,
                "sub": len(self._events),
                "key": key,
                "type": type_,
                "value": value,
                "create_revision": create,
                "version": version,
                "lease": lease,
            }
        )

    def put(self, op: Put) -> None:
        self._puts.append(op)

    def flush(self) -> None:
        if not self._puts:
            return
        puts, self._puts = self._puts, []
        raw_keys = [op.key.encode() for op in puts]
        existing: dict[bytes, tuple[int, int]] = {}
        for start in range(0, len(raw_keys), 500):
            rows = self._conn.execute(
                sa.select(kv_table.c.key, kv_table.c.create_revision, kv_table.c.version).where(
                    kv_table.c.key.in_(raw_keys[start : start + 500])
                )
            )
            existing.update((bytes(row.key), (row.create_revision, row.version)) for row in rows)
        inserts: list[dict[str, Any]] = []
        updates: list[dict[str, Any]] = []
        for op, raw in zip(puts, raw_keys, strict=True):
            create, version = existing.get(raw, (self.revision, 0))
            row = {"value": op.value, "version": version + 1, "lease": op.lease}
            if raw in existing:
                updates.append({"k": raw, **row})
            else:
                inserts.append({"key": raw, "create_revision": create, **row})
            self._event(raw, PUT_EVENT, op.value, create, version + 1, op.lease)
        if inserts:
            self._conn.execute(kv_table.insert().values(mod_revision=self.revision), inserts)
        if updates:
            self._conn.execute(
                kv_table.update()
                .where(kv_table.c.key == sa.bindparam("k"))
                .values(mod_revision=self.revision),
                updates,
            )

    def delete(self, keys: list[bytes]) -> None:
        self.flush()
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            self._conn.execute(kv_table.delete().where(kv_table.c.key.in_(chunk)))
            for key in chunk:
                self._event(key, DELETE_EVENT, b"", 0, 0, 0)

    def finish(self) -> int:
        self.flush()
        if self._events:
            self._conn.execute(events_table.insert(), self._events)
            self._conn.execute(meta_table.update().values(revision=self.revision))
        return self.revision
