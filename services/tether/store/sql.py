"""The embedded store: etcd's data model on SQLAlchemy (SQLite in WAL mode, or PostgreSQL).

Four tables: `kv` (the current value of every key), `events` (every change, one row per key per
revision: the watch log and the history behind reads at an older revision), `leases`, and `meta`
(the global revision and the compaction point). A write transaction holds SQLite's write lock
(BEGIN IMMEDIATE; on PostgreSQL a row lock on `meta`), so revisions are strictly sequential even
with many processes on one file. Compaction keeps, like etcd, the newest version of every live key.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tether.aio import cancel_and_wait
from tether.config import StoreSettings
from tether.store.base import (
    CompactedError,
    Compare,
    Delete,
    DeleteResult,
    Get,
    KeyValue,
    LeaseNotFound,
    Op,
    OpResult,
    Put,
    PutResult,
    RangeResult,
    Store,
    StoreError,
    StoreUnavailable,
    TxnResult,
    Watch,
    WatchEvent,
)
from tether.store.sql_probe import Housekeeping, ProbeBusy, SqliteProbe
from tether.store.sql_tables import (
    DELETE_EVENT,
    PUT_EVENT,
    RevisionWriter,
    event_from_row,
    events_table,
    kv_from_row,
    kv_table,
    leases_table,
    make_engine,
    meta_table,
    metadata,
    sqlite_path,
    under,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_WATCH_BATCH = 1_000
_REAPER_INTERVAL_S = 0.25
_EXPIRE_BATCH = 500
# Lease ids are random 63-bit integers, like etcd's, so ids from many processes never collide.
_LEASE_ID_BITS = 62


class SqlStore(Store):
    """The store on one SQL database, shared safely by every process that opens the same URL."""

    def __init__(self, url: str, settings: StoreSettings | None = None) -> None:
        self.url = url
        self._settings = settings or StoreSettings(TETHER_STORE=url)
        path = sqlite_path(url)
        self._engine = make_engine(url, path)
        self._is_sqlite = self._engine.dialect.name == "sqlite"
        # One writer per process at a time: SQLite's own busy wait sleeps far too long.
        self._write_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="tether-sql")
        self._closed = False
        self._background: asyncio.Task[None] | None = None
        self._revision_changed = asyncio.Condition()
        self._seen_revision = 0
        self._active_watches = 0
        self._run_sync(self._create_schema)
        self._probe = None if path is None else SqliteProbe(path)

    # --- plumbing ----------------------------------------------------------------------------

    def _create_schema(self) -> None:
        with self._engine.connect().execution_options(tether_write=True) as conn:
            metadata.create_all(conn)
            if conn.execute(sa.select(meta_table.c.id)).first() is None:
                # etcd starts an empty store at revision 1; so do we.
                conn.execute(meta_table.insert().values(id=1, revision=1, compacted=0))
            conn.commit()

    def _run_sync(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except sa.exc.OperationalError as exc:
            raise StoreUnavailable(f"SQL store {self._safe_url()}: {exc.orig}") from exc

    async def _run(self, fn: Callable[[], T]) -> T:
        if self._closed:
            raise StoreError("the store is closed")
        self._ensure_background()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._run_sync, fn)

    def _safe_url(self) -> str:
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        conn = self._engine.connect()
        if not self._is_sqlite:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        try:
            with conn.begin():
                yield conn
        finally:
            conn.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[tuple[Connection, int, int]]:
        """A write transaction holding the database's write lock; yields (conn, rev, compacted)."""
        with self._write_lock, self._engine.connect() as conn:
            conn = conn.execution_options(tether_write=True)
            with conn.begin():
                row = conn.execute(
                    sa.select(meta_table.c.revision, meta_table.c.compacted)
                    .where(meta_table.c.id == 1)
                    .with_for_update()
                ).one()
                yield conn, row.revision, row.compacted

    def _ensure_background(self) -> None:
        if self._background is None or self._background.done():
            self._background = asyncio.get_running_loop().create_task(
                self._maintain(), name=f"tether-sql-maintenance:{self._safe_url()}"
            )

    async def _maintain(self) -> None:
        """Expires leases, compacts old history, and, while a watch is open, notices other
        processes' writes."""
        loop = asyncio.get_running_loop()
        next_housekeeping = 0.0
        while not self._closed:
            try:
                if loop.time() >= next_housekeeping:
                    next_housekeeping = loop.time() + _REAPER_INTERVAL_S
                    await self._keep_house()
                if self._active_watches:
                    await self._notice_writes()
            except sa.exc.OperationalError as exc:
                log.warning("SQL store maintenance failed, retrying: %s", exc.orig)
            except RuntimeError:
                return  # the executor was shut down by close()
            idle = _REAPER_INTERVAL_S if not self._active_watches else 0
            await asyncio.sleep(idle or self._settings.sql_poll_interval_s)

    async def _keep_house(self) -> None:
        """Expires the leases past their time and compacts when history has grown (nearly
        always there is nothing to do)."""
        work = await self._look(
            lambda probe: probe.housekeeping(time.time(), _EXPIRE_BATCH), self._housekeeping_sync
        )
        if work.expired or self._compaction_point(work) is not None:
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self._do_housekeeping_sync, work
            )

    async def _notice_writes(self) -> None:
        """Wakes the watches if the store's revision has moved (another process wrote)."""
        revision = await self._look(SqliteProbe.revision_if_changed, self._current_revision_sync)
        if revision is not None:
            await self._observe_revision(revision)

    async def _look(self, on_probe: Callable[[SqliteProbe], T], slow: Callable[[], T]) -> T:
        """`on_probe(probe)` on the event loop where there is a probe and the file is not
        locked, else `slow()` (a pooled transaction) in a worker thread."""
        if self._probe is not None:
            with contextlib.suppress(ProbeBusy):
                return on_probe(self._probe)
        return await asyncio.get_running_loop().run_in_executor(self._executor, slow)

    async def _observe_revision(self, revision: int) -> None:
        if revision > self._seen_revision:
            async with self._revision_changed:
                self._seen_revision = max(self._seen_revision, revision)
                self._revision_changed.notify_all()

    async def _wait_for_revision_after(self, revision: int, stop: Callable[[], bool]) -> None:
        async with self._revision_changed:
            await self._revision_changed.wait_for(
                lambda: self._seen_revision > revision or self._closed or stop()
            )

    async def _wake_watches(self) -> None:
        async with self._revision_changed:
            self._revision_changed.notify_all()

    # --- reads -------------------------------------------------------------------------------

    def _current_revision_sync(self) -> int:
        with self._read() as conn:
            return int(conn.execute(sa.select(meta_table.c.revision)).scalar_one())

    async def revision(self) -> int:
        return await self._run(self._current_revision_sync)

    async def get(self, key: str) -> KeyValue | None:
        def read() -> KeyValue | None:
            with self._read() as conn:
                row = conn.execute(
                    sa.select(kv_table).where(kv_table.c.key == key.encode())
                ).first()
                return None if row is None else kv_from_row(row)

        return await self._run(read)

    async def range(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int = 0,
        revision: int = 0,
    ) -> RangeResult:
        if limit < 0 or revision < 0:
            raise StoreError("range limit and revision must not be negative")

        def read() -> RangeResult:
            with self._read() as conn:
                current, compacted = conn.execute(
                    sa.select(meta_table.c.revision, meta_table.c.compacted)
                ).one()
                if revision > current:
                    raise StoreError(f"revision {revision} is in the future (now {current})")
                if revision and revision < compacted:
                    raise CompactedError(revision, compacted)
                if revision in (0, current):
                    kvs = self._range_current(conn, prefix, start_after, limit)
                else:
                    kvs = self._range_at(conn, prefix, start_after, limit, revision)
                more = bool(limit) and len(kvs) > limit
                return RangeResult(kvs[:limit] if more else kvs, revision or current, more)

        return await self._run(read)

    @staticmethod
    def _range_current(
        conn: Connection, prefix: str, start_after: str | None, limit: int
    ) -> list[KeyValue]:
        query = sa.select(kv_table).where(under(kv_table.c.key, prefix)).order_by(kv_table.c.key)
        if start_after is not None:
            query = query.where(kv_table.c.key > start_after.encode())
        if limit:
            query = query.limit(limit + 1)
        return [kv_from_row(row) for row in conn.execute(query)]

    @staticmethod
    def _range_at(
        conn: Connection, prefix: str, start_after: str | None, limit: int, revision: int
    ) -> list[KeyValue]:
        e = events_table.c
        latest = sa.select(e.key, sa.func.max(e.revision).label("revision")).where(
            under(events_table.c.key, prefix), e.revision <= revision
        )
        if start_after is not None:
            latest = latest.where(e.key > start_after.encode())
        latest_sq = latest.group_by(e.key).subquery()
        query = (
            sa.select(
                e.key,
                e.value,
                e.create_revision,
                e.revision.label("mod_revision"),
                e.version,
                e.lease,
            )
            .join(latest_sq, sa.and_(e.key == latest_sq.c.key, e.revision == latest_sq.c.revision))
            .where(e.type == PUT_EVENT)
            .order_by(e.key)
        )
        if limit:
            query = query.limit(limit + 1)
        return [kv_from_row(row) for row in conn.execute(query)]

    async def count(self, prefix: str) -> int:
        def read() -> int:
            with self._read() as conn:
                query = sa.select(sa.func.count()).where(under(kv_table.c.key, prefix))
                return int(conn.execute(query).scalar_one())

        return await self._run(read)

    # --- writes ------------------------------------------------------------------------------

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        for branch in (success, failure):
            _reject_duplicate_writes(branch)
        result = await self._run(lambda: self._txn_sync(compares, success, failure))
        await self._observe_revision(result.revision)
        return result

    def _txn_sync(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]
    ) -> TxnResult:
        with self._write() as (conn, revision, _compacted):
            current: dict[str, KeyValue | None] = {}
            for compare in compares:
                if compare.key not in current:
                    current[compare.key] = self._get_for_update(conn, compare.key)
            succeeded = all(compare.holds_for(current[compare.key]) for compare in compares)
            writer = RevisionWriter(conn, revision + 1)
            results: list[OpResult] = []
            for op in success if succeeded else failure:
                results.append(self._apply(conn, writer, op, revision))
            new_revision = writer.finish()
            return TxnResult(succeeded, new_revision if writer.changed else revision, results)

    @staticmethod
    def _get_for_update(conn: Connection, key: str) -> KeyValue | None:
        row = conn.execute(sa.select(kv_table).where(kv_table.c.key == key.encode())).first()
        return None if row is None else kv_from_row(row)

    def _apply(self, conn: Connection, writer: RevisionWriter, op: Op, revision: int) -> OpResult:
        if isinstance(op, Get):
            writer.flush()
            if op.prefix:
                kvs = self._range_current(conn, op.key, None, 0)
            else:
                found = self._get_for_update(conn, op.key)
                kvs = [] if found is None else [found]
            return RangeResult(kvs, writer.revision if writer.changed else revision)
        if isinstance(op, Put):
            if (
                op.lease
                and conn.execute(
                    sa.select(leases_table.c.id).where(
                        leases_table.c.id == op.lease, leases_table.c.expires_at > time.time()
                    )
                ).first()
                is None
            ):
                raise LeaseNotFound(op.lease)
            writer.put(op)
            return PutResult()
        if op.prefix:
            keys = [
                row.key
                for row in conn.execute(
                    sa.select(kv_table.c.key).where(under(kv_table.c.key, op.key))
                )
            ]
        else:
            keys = [
                row.key
                for row in conn.execute(
                    sa.select(kv_table.c.key).where(kv_table.c.key == op.key.encode())
                )
            ]
        writer.delete(keys)
        return DeleteResult(len(keys))

    # --- leases ------------------------------------------------------------------------------

    async def lease_grant(self, ttl_s: int) -> int:
        if ttl_s < 1:
            raise StoreError(f"lease TTL must be at least 1 s, not {ttl_s}")
        lease = secrets.randbits(_LEASE_ID_BITS) + 1

        def grant() -> int:
            with self._write() as (conn, _revision, _compacted):
                conn.execute(
                    leases_table.insert().values(
                        id=lease, ttl=ttl_s, expires_at=time.time() + ttl_s
                    )
                )
            return lease

        return await self._run(grant)

    async def lease_keepalive(self, lease: int) -> int:
        def keepalive() -> int:
            with self._write() as (conn, _revision, _compacted):
                row = conn.execute(
                    sa.select(leases_table.c.ttl, leases_table.c.expires_at).where(
                        leases_table.c.id == lease
                    )
                ).first()
                now = time.time()
                if row is None or row.expires_at <= now:
                    raise LeaseNotFound(lease)
                conn.execute(
                    leases_table.update()
                    .where(leases_table.c.id == lease)
                    .values(expires_at=now + row.ttl)
                )
                return int(row.ttl)

        return await self._run(keepalive)

    async def lease_time_to_live(self, lease: int) -> int | None:
        def time_to_live() -> int | None:
            with self._read() as conn:
                expires_at = conn.execute(
                    sa.select(leases_table.c.expires_at).where(leases_table.c.id == lease)
                ).scalar()
            left = None if expires_at is None else expires_at - time.time()
            return None if left is None or left <= 0 else int(left)

        return await self._run(time_to_live)

    async def lease_revoke(self, lease: int) -> None:
        revision = await self._run(lambda: self._expire_sync([lease]))
        await self._observe_revision(revision)

    def _expire_sync(self, leases: list[int]) -> int:
        """Deletes the leases and their keys in one revision; returns the store revision."""
        with self._write() as (conn, revision, _compacted):
            writer = RevisionWriter(conn, revision + 1)
            keys = [
                row.key
                for row in conn.execute(
                    sa.select(kv_table.c.key)
                    .where(kv_table.c.lease.in_(leases))
                    .order_by(kv_table.c.key)
                )
            ]
            writer.delete(keys)
            conn.execute(leases_table.delete().where(leases_table.c.id.in_(leases)))
            return writer.finish() if writer.changed else revision

    def _housekeeping_sync(self) -> Housekeeping:
        now = time.time()
        with self._read() as conn:
            expired = [
                row.id
                for row in conn.execute(
                    sa.select(leases_table.c.id)
                    .where(leases_table.c.expires_at <= now)
                    .limit(_EXPIRE_BATCH)
                )
            ]
            revision, compacted = conn.execute(
                sa.select(meta_table.c.revision, meta_table.c.compacted)
            ).one()
        return Housekeeping(expired, revision, compacted)

    def _do_housekeeping_sync(self, work: Housekeeping) -> None:
        if work.expired:
            self._expire_sync(work.expired)
        point = self._compaction_point(work)
        if point is not None:
            self._compact_sync(point)

    def _compaction_point(self, work: Housekeeping) -> int | None:
        """The revision to compact to, if history has outgrown the retention by a tenth (so
        that the cost is paid rarely)."""
        retention = self._settings.sql_event_retention
        if work.revision - max(work.compacted, 1) > retention + retention // 10:
            return work.revision - retention
        return None

    # --- history -----------------------------------------------------------------------------

    def watch(self, prefix: str, *, start_revision: int) -> Watch:
        return _SqlWatch(self, prefix, start_revision)

    async def compact(self, revision: int) -> None:
        await self._run(lambda: self._compact_sync(revision))

    def _compact_sync(self, revision: int) -> None:
        with self._write() as (conn, current, compacted):
            if revision > current:
                raise StoreError(f"cannot compact to {revision}: the store is at {current}")
            if revision <= compacted:
                return
            e = events_table.c
            newer = events_table.alias("newer")
            # Keep the newest version (below the compaction point) of every key that still
            # exists then: reads at any retained revision need it.
            superseded = sa.exists().where(
                newer.c.key == e.key,
                newer.c.revision > e.revision,
                newer.c.revision < revision,
            )
            conn.execute(
                events_table.delete().where(
                    e.revision < revision, sa.or_(e.type == DELETE_EVENT, superseded)
                )
            )
            conn.execute(meta_table.update().values(compacted=revision))

    def _watch_fetch_sync(self, prefix: str, start: int) -> tuple[list[list[WatchEvent]], int]:
        """Whole revisions of events under `prefix` from `start` on, and the store revision they
        were read at."""
        with self._read() as conn:
            current, compacted = conn.execute(
                sa.select(meta_table.c.revision, meta_table.c.compacted)
            ).one()
            if start < compacted:
                raise CompactedError(start, compacted)
            e = events_table.c
            query = (
                sa.select(events_table)
                .where(e.revision >= start, under(events_table.c.key, prefix))
                .order_by(e.revision, e.sub)
            )
            rows = conn.execute(query.limit(_WATCH_BATCH)).all()
            if len(rows) == _WATCH_BATCH:
                last = rows[-1].revision
                if rows[0].revision == last:
                    # One revision larger than a batch: take all of it.
                    rows = conn.execute(query.where(e.revision == last)).all()
                else:
                    # The last revision may be cut short; leave it for the next fetch.
                    rows = [row for row in rows if row.revision != last]
                current = rows[-1].revision
            revisions: list[list[WatchEvent]] = []
            for row in rows:
                if not revisions or revisions[-1][0].revision != row.revision:
                    revisions.append([])
                revisions[-1].append(event_from_row(row))
            return revisions, int(current)

    # --- lifecycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._wake_watches()
        await cancel_and_wait(self._background)
        if self._probe is not None:
            self._probe.close()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._engine.dispose)
        self._executor.shutdown(wait=True)


def _reject_duplicate_writes(ops: Sequence[Op]) -> None:
    # etcd refuses a transaction that writes one key twice; refuse it the same way.
    seen: set[str] = set()
    for op in ops:
        if isinstance(op, Put | Delete) and not (isinstance(op, Delete) and op.prefix):
            if op.key in seen:
                raise StoreError(f"duplicate key {op.key!r} in one transaction")
            seen.add(op.key)


class _SqlWatch(Watch):
    def __init__(self, store: SqlStore, prefix: str, start_revision: int) -> None:
        super().__init__(prefix, start_revision)
        self._store = store
        self._closed = False

    async def _revisions(self) -> AsyncIterator[list[WatchEvent]]:
        store = self._store
        if self.next_revision <= 0:
            self.next_revision = await store.revision() + 1
        store._active_watches += 1
        try:
            async for events in self._poll():
                yield events
        finally:
            store._active_watches -= 1

    async def _poll(self) -> AsyncIterator[list[WatchEvent]]:
        store = self._store
        while not self._closed:
            revisions, read_at = await store._run(
                functools.partial(store._watch_fetch_sync, self.prefix, self.next_revision)
            )
            for events in revisions:
                if self._closed:
                    return
                self.next_revision = events[0].revision + 1
                yield events
            # Every change under the prefix up to `read_at` has been delivered.
            self.next_revision = max(self.next_revision, read_at + 1)
            await store._observe_revision(read_at)
            await store._wait_for_revision_after(read_at, lambda: self._closed)
        if store._closed:
            raise StoreError("the store was closed while watching")

    async def close(self) -> None:
        self._closed = True
        await self._store._wake_watches()
