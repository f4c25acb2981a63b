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
from typing import Final, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from tether.aio import cancel_and_wait, wait_set
from tether.config import StoreSettings
from tether.store.base import (
    CompactedError,
    Compare,
    KeyValue,
    Op,
    RangeResult,
    Store,
    StoreError,
    StoreMissing,
    StoreUnavailable,
    TxnResult,
    Watch,
    WatchEvent,
)
from tether.store.sql_probe import Housekeeping, ProbeBusy, SqliteProbe
from tether.store.sql_queries import (
    compact_history,
    count_under,
    delete_lease_keys,
    end_leases,
    fetch_events,
    forget_leases,
    grant_lease,
    housekeeping,
    lease_expires_at,
    range_at,
    range_current,
    read_key,
    reject_duplicate_writes,
    renew_lease,
    revision_and_compacted,
    run_txn,
)
from tether.store.sql_tables import (
    make_engine,
    meta_table,
    metadata,
    move_old_leases,
    sqlite_path,
)
from tether.store.sql_wake import FileWaker

log = logging.getLogger(__name__)

T = TypeVar("T")

_WATCH_BATCH = 1_000
_HOUSEKEEPING_MAX_S = 1.0
"""The longest a process goes without looking for expired leases and history to compact. It
looks when the next lease it knows of expires, if sooner: every process of a region looks, and
looking four times a second cost an idle region a tenth of a core. A lease another process
granted since the last look may expire up to this much late."""
_SETTLE_S = 0.5
"""How long maintenance keeps looking, every `sql_poll_interval_s`, after the file was written
with no commit to be seen: SQLite writes a commit's last page to the log before it makes the
commit visible (in shared memory, which raises no file event), so a look between the two finds
nothing, and no further write may come to wake it."""
_EXPIRE_BATCH = 500
_PAST_EXPIRY_S = 0.01
"""How long after a lease's expiry maintenance looks: a look that comes too early finds
nothing and must come again."""
# Lease ids are random 63-bit integers, like etcd's, so ids from many processes never collide.
_LEASE_ID_BITS = 62


SCHEMA_LOCK: Final = 0x7E7E_0001
"""The PostgreSQL advisory lock that serializes creating the schema."""


class SqlStore(Store):
    """The store on one SQL database, shared safely by every process that opens the same URL."""

    def __init__(
        self, url: str, settings: StoreSettings | None = None, *, create: bool = True
    ) -> None:
        self.url = url
        self._settings = settings or StoreSettings(TETHER_STORE=url)
        path = sqlite_path(url)
        if not create and path is not None and not path.is_file():
            raise StoreMissing(f"there is no SQLite store at {path}")
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
        self._housekeeping_due = 0.0
        """When maintenance looks for expired leases next (the event loop's clock)."""
        self._watch_opened = asyncio.Event()
        """Wakes maintenance that waits for housekeeping alone: a watch opened."""
        self._run_sync(self._create_schema)
        self._probe = None if path is None else SqliteProbe(path)
        self._waker = None if path is None else FileWaker.open(path)

    # --- plumbing ----------------------------------------------------------------------------

    def _create_schema(self) -> None:
        with self._engine.connect().execution_options(tether_write=True) as conn:
            if not self._is_sqlite:
                # Processes opening a new PostgreSQL store at once would race to create the
                # same tables (and the first revision): one at a time, until commit.
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
            metadata.create_all(conn)
            if self._is_sqlite:
                move_old_leases(conn)
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
        settle_until = 0.0
        while not self._closed:
            committed = False
            try:
                if loop.time() >= self._housekeeping_due:
                    # Should it fail, it is tried again this much later.
                    self._housekeeping_due = loop.time() + _HOUSEKEEPING_MAX_S
                    self._housekeeping_due = loop.time() + await self._keep_house()
                if self._active_watches:
                    committed = await self._notice_writes()
            except sa.exc.OperationalError as exc:
                log.warning("SQL store maintenance failed, retrying: %s", exc.orig)
            except RuntimeError:
                return  # the executor was shut down by close()
            settling = not committed and loop.time() < settle_until
            written = await self._pause(self._housekeeping_due - loop.time(), committed, settling)
            if written:
                settle_until = loop.time() + _SETTLE_S

    async def _pause(self, housekeeping_due_s: float, committed: bool, settling: bool) -> bool:
        """Until the next look; whether the file's waker fired. While watches are open: until
        another process may have written (the file's waker fires; without one, every
        `sql_poll_interval_s`), and, after a look that found a commit, not sooner than
        `sql_poll_interval_s`, so that a burst of writes is read in batches. While `settling`
        (a write was seen lately that no look has found committed yet: see `_SETTLE_S`),
        `sql_poll_interval_s` alone. Housekeeping is due when `_keep_house` said, whatever
        happens."""
        if not self._active_watches:
            # A watch that opens meanwhile must hear other processes' writes from then on.
            await wait_set(self._watch_opened, max(housekeeping_due_s, 0))
            self._watch_opened.clear()
            return False
        interval_s = self._settings.sql_poll_interval_s
        if self._waker is None or committed or settling:
            await asyncio.sleep(interval_s)
            housekeeping_due_s -= interval_s
        if self._waker is None:
            return False
        return await self._waker.wait(0 if settling else max(housekeeping_due_s, 0))

    async def _keep_house(self) -> float:
        """Expires the leases past their time and compacts when history has grown (nearly
        always there is nothing to do); returns the seconds until it is due again."""
        work = await self._look(
            lambda probe: probe.housekeeping(time.time(), _EXPIRE_BATCH), self._housekeeping_sync
        )
        if work.expired or self._compaction_point(work) is not None:
            await asyncio.get_running_loop().run_in_executor(
                self._executor, self._do_housekeeping_sync, work
            )
        if len(work.expired) == _EXPIRE_BATCH:
            return 0.0  # more may have expired than one batch holds
        if work.next_expiry is None:
            return _HOUSEKEEPING_MAX_S
        return min(max(work.next_expiry - time.time(), 0.0) + _PAST_EXPIRY_S, _HOUSEKEEPING_MAX_S)

    async def _notice_writes(self) -> bool:
        """Wakes the watches if the store's revision has moved (another process wrote);
        returns whether anything was committed since the last look."""
        revision = await self._look(SqliteProbe.revision_if_changed, self._current_revision_sync)
        if revision is not None:
            await self._observe_revision(revision)
        return revision is not None

    async def _look(self, on_probe: Callable[[SqliteProbe], T], slow: Callable[[], T]) -> T:
        """`on_probe(probe)` on the event loop where there is a probe and the file is not
        locked, else `slow()` (a pooled transaction) in a worker thread."""
        if self._probe is not None:
            with contextlib.suppress(ProbeBusy):
                return on_probe(self._probe)
        return await asyncio.get_running_loop().run_in_executor(self._executor, slow)

    def _untouched_until(self, prefix: str, start: int) -> int | None:
        """`SqliteProbe.untouched_until` where there is a probe and the file is not locked;
        None (read the events) otherwise."""
        if self._probe is None:
            return None
        try:
            return self._probe.untouched_until(prefix, start)
        except ProbeBusy:
            return None

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
            return revision_and_compacted(conn)[0]

    async def revision(self) -> int:
        return await self._run(self._current_revision_sync)

    async def get(self, key: str) -> KeyValue | None:
        def read() -> KeyValue | None:
            with self._read() as conn:
                return read_key(conn, key)

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
                current, compacted = revision_and_compacted(conn)
                if revision > current:
                    raise StoreError(f"revision {revision} is in the future (now {current})")
                if revision and revision < compacted:
                    raise CompactedError(revision, compacted)
                if revision in (0, current):
                    kvs = range_current(conn, prefix, start_after, limit)
                else:
                    kvs = range_at(conn, prefix, start_after, limit, revision)
                more = bool(limit) and len(kvs) > limit
                return RangeResult(kvs[:limit] if more else kvs, revision or current, more)

        return await self._run(read)

    async def count(self, prefix: str) -> int:
        def read() -> int:
            with self._read() as conn:
                return count_under(conn, prefix)

        return await self._run(read)

    # --- writes ------------------------------------------------------------------------------

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        for branch in (success, failure):
            reject_duplicate_writes(branch)
        result = await self._run(lambda: self._txn_sync(compares, success, failure))
        await self._observe_revision(result.revision)
        return result

    def _txn_sync(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op]
    ) -> TxnResult:
        with self._write() as (conn, revision, _compacted):
            return run_txn(conn, revision, compares, success, failure)

    # --- leases ------------------------------------------------------------------------------

    async def lease_grant(self, ttl_s: int) -> int:
        if ttl_s < 1:
            raise StoreError(f"lease TTL must be at least 1 s, not {ttl_s}")
        lease = secrets.randbits(_LEASE_ID_BITS) + 1

        def grant() -> int:
            with self._write() as (conn, _revision, _compacted):
                grant_lease(conn, lease, ttl_s)
            return lease

        granted = await self._run(grant)
        # Its expiry may come before maintenance would look again.
        expires = asyncio.get_running_loop().time() + ttl_s + _PAST_EXPIRY_S
        self._housekeeping_due = min(self._housekeeping_due, expires)
        return granted

    async def lease_keepalive(self, lease: int) -> int:
        def keepalive() -> int:
            with self._write() as (conn, _revision, _compacted):
                return renew_lease(conn, lease)

        return await self._run(keepalive)

    async def lease_time_to_live(self, lease: int) -> int | None:
        def time_to_live() -> int | None:
            with self._read() as conn:
                expires_at = lease_expires_at(conn, lease)
            return None if expires_at is None else max(0, int(expires_at - time.time()))

        return await self._run(time_to_live)

    async def lease_revoke(self, lease: int) -> None:
        def revoke() -> int:
            with self._write() as (conn, _revision, _compacted):
                end_leases(conn, [lease])
            return self._expire_sync([lease])

        await self._observe_revision(await self._run(revoke))

    def _expire_sync(self, leases: list[int]) -> int:
        """Deletes the keys of the leases, which have expired (or ended), in one revision, then
        the leases; returns the store revision.

        Two transactions, each on one file: SQLite commits a transaction over two files in WAL
        mode one file at a time, and a crash between them must not leave keys on a lease that
        is gone, which nothing would delete. An expired lease is never renewed nor given keys,
        so the first does it all; should the second not happen, the next look does it."""
        with self._write() as (conn, revision, _compacted):
            revision = delete_lease_keys(conn, revision, leases)
        with self._write() as (conn, _revision, _compacted):
            forget_leases(conn, leases, time.time())
        return revision

    def _housekeeping_sync(self) -> Housekeeping:
        with self._read() as conn:
            return housekeeping(conn, time.time(), _EXPIRE_BATCH)

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
            compact_history(conn, revision)

    def _watch_fetch_sync(self, prefix: str, start: int) -> tuple[list[list[WatchEvent]], int]:
        """Whole revisions of events under `prefix` from `start` on, and the store revision they
        were read at."""
        with self._read() as conn:
            return fetch_events(conn, prefix, start, _WATCH_BATCH)

    # --- lifecycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._wake_watches()
        await cancel_and_wait(self._background)
        if self._probe is not None:
            self._probe.close()
        if self._waker is not None:
            self._waker.close()
        await asyncio.get_running_loop().run_in_executor(self._executor, self._engine.dispose)
        self._executor.shutdown(wait=True)


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
        store._watch_opened.set()
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
            # Writes under other prefixes need no read: skip past them on the probe.
            while not (self._closed or store._closed) and (
                (skipped := store._untouched_until(self.prefix, self.next_revision)) is not None
            ):
                self.next_revision = skipped + 1
                await store._wait_for_revision_after(skipped, lambda: self._closed)
        if store._closed:
            raise StoreError("the store was closed while watching")

    async def close(self) -> None:
        self._closed = True
        await self._store._wake_watches()
