"""The embedded store's statements on one open transaction: reads at the current or an older
revision, the ops of a transaction, lease expiry, compaction and the watch log's fetch."""

from __future__ import annotations

import time
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

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
    StoreError,
    TxnResult,
    WatchEvent,
)
from tether.store.sql_probe import Housekeeping
from tether.store.sql_tables import (
    DELETE_EVENT,
    PUT_EVENT,
    RevisionWriter,
    event_from_row,
    events_table,
    kv_from_row,
    kv_table,
    leases_table,
    meta_table,
    under,
)


def revision_and_compacted(conn: Connection) -> tuple[int, int]:
    """The store's revision and its compaction point."""
    row = conn.execute(sa.select(meta_table.c.revision, meta_table.c.compacted)).one()
    return int(row.revision), int(row.compacted)


def read_key(conn: Connection, key: str) -> KeyValue | None:
    """The key's current value; None when it does not exist."""
    row = conn.execute(sa.select(kv_table).where(kv_table.c.key == key.encode())).first()
    return None if row is None else kv_from_row(row)


def range_current(
    conn: Connection, prefix: str, start_after: str | None, limit: int
) -> list[KeyValue]:
    """The current keys under `prefix` after `start_after`, in key order; one beyond `limit`
    (when set) so the caller can tell whether there are more."""
    query = sa.select(kv_table).where(under(kv_table.c.key, prefix)).order_by(kv_table.c.key)
    if start_after is not None:
        query = query.where(kv_table.c.key > start_after.encode())
    if limit:
        query = query.limit(limit + 1)
    return [kv_from_row(row) for row in conn.execute(query)]


def range_at(
    conn: Connection, prefix: str, start_after: str | None, limit: int, revision: int
) -> list[KeyValue]:
    """`range_current` as of an older `revision`, from the history in the events table."""
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


def count_under(conn: Connection, prefix: str) -> int:
    """How many keys there are under `prefix`."""
    query = sa.select(sa.func.count()).where(under(kv_table.c.key, prefix))
    return int(conn.execute(query).scalar_one())


def reject_duplicate_writes(ops: Sequence[Op]) -> None:
    """Refuses ops that write one key twice, as etcd refuses such a transaction."""
    seen: set[str] = set()
    for op in ops:
        if isinstance(op, Put | Delete) and not (isinstance(op, Delete) and op.prefix):
            if op.key in seen:
                raise StoreError(f"duplicate key {op.key!r} in one transaction")
            seen.add(op.key)


def run_txn(
    conn: Connection,
    revision: int,
    compares: Sequence[Compare],
    success: Sequence[Op],
    failure: Sequence[Op],
) -> TxnResult:
    """An etcd transaction on a store at `revision`: `success` if every compare holds, else
    `failure`, the writes of either under the next revision."""
    current: dict[str, KeyValue | None] = {}
    for compare in compares:
        if compare.key not in current:
            current[compare.key] = read_key(conn, compare.key)
    succeeded = all(compare.holds_for(current[compare.key]) for compare in compares)
    writer = RevisionWriter(conn, revision + 1)
    results = [apply_op(conn, writer, op, revision) for op in (success if succeeded else failure)]
    new_revision = writer.finish()
    return TxnResult(succeeded, new_revision if writer.changed else revision, results)


def apply_op(conn: Connection, writer: RevisionWriter, op: Op, revision: int) -> OpResult:
    """One op of a transaction that started at `revision`, its writes through `writer`."""
    if isinstance(op, Get):
        writer.flush()
        if op.prefix:
            kvs = range_current(conn, op.key, None, 0)
        else:
            found = read_key(conn, op.key)
            kvs = [] if found is None else [found]
        return RangeResult(kvs, writer.revision if writer.changed else revision)
    if isinstance(op, Put):
        if op.lease and lease_expires_at(conn, op.lease) is None:
            raise LeaseNotFound(op.lease)
        writer.put(op)
        return PutResult()
    deleted = under(kv_table.c.key, op.key) if op.prefix else kv_table.c.key == op.key.encode()
    keys = [row.key for row in conn.execute(sa.select(kv_table.c.key).where(deleted))]
    writer.delete(keys)
    return DeleteResult(len(keys))


def grant_lease(conn: Connection, lease: int, ttl_s: int) -> None:
    """Creates the lease, expiring `ttl_s` from now."""
    conn.execute(leases_table.insert().values(id=lease, ttl=ttl_s, expires_at=time.time() + ttl_s))


def lease_expires_at(conn: Connection, lease: int) -> float | None:
    """When the lease expires (epoch seconds); None when it does not exist or has expired."""
    expires_at = conn.execute(
        sa.select(leases_table.c.expires_at).where(leases_table.c.id == lease)
    ).scalar()
    return None if expires_at is None or expires_at <= time.time() else float(expires_at)


def renew_lease(conn: Connection, lease: int) -> int:
    """Extends the lease by its TTL from now; returns the TTL."""
    row = conn.execute(
        sa.select(leases_table.c.ttl, leases_table.c.expires_at).where(leases_table.c.id == lease)
    ).first()
    now = time.time()
    if row is None or row.expires_at <= now:
        raise LeaseNotFound(lease)
    conn.execute(
        leases_table.update().where(leases_table.c.id == lease).values(expires_at=now + row.ttl)
    )
    return int(row.ttl)


def end_leases(conn: Connection, leases: list[int]) -> None:
    """Makes the leases expired: from now on they are neither renewed nor given keys."""
    conn.execute(leases_table.update().where(leases_table.c.id.in_(leases)).values(expires_at=0))


def delete_lease_keys(conn: Connection, revision: int, leases: list[int]) -> int:
    """Deletes the keys of the leases in one revision after `revision`; returns the store's
    revision after."""
    writer = RevisionWriter(conn, revision + 1)
    held = sa.select(kv_table.c.key).where(kv_table.c.lease.in_(leases)).order_by(kv_table.c.key)
    writer.delete([row.key for row in conn.execute(held)])
    return writer.finish() if writer.changed else revision


def forget_leases(conn: Connection, leases: list[int], now: float) -> None:
    """Deletes those of the leases that have expired by `now`."""
    expired = leases_table.c.id.in_(leases) & (leases_table.c.expires_at <= now)
    conn.execute(leases_table.delete().where(expired))


def housekeeping(conn: Connection, now: float, batch: int) -> Housekeeping:
    """The leases expired by `now` (at most `batch`), the revision and compaction point, and
    the next expiry."""
    expires_at = leases_table.c.expires_at
    expired = [
        row.id
        for row in conn.execute(sa.select(leases_table.c.id).where(expires_at <= now).limit(batch))
    ]
    next_expiry = conn.execute(sa.select(sa.func.min(expires_at)).where(expires_at > now))
    return Housekeeping(expired, *revision_and_compacted(conn), next_expiry.scalar())


def compact_history(conn: Connection, revision: int) -> None:
    """Drops the history below `revision`, but the newest version of every key that still
    exists then: reads at any retained revision need it."""
    e = events_table.c
    newer = events_table.alias("newer")
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


def fetch_events(
    conn: Connection, prefix: str, start: int, batch: int
) -> tuple[list[list[WatchEvent]], int]:
    """Whole revisions of events under `prefix` from `start` on (about `batch` events at most),
    and the store revision they were read at."""
    current, compacted = revision_and_compacted(conn)
    if start < compacted:
        raise CompactedError(start, compacted)
    e = events_table.c
    query = (
        sa.select(events_table)
        .where(e.revision >= start, under(events_table.c.key, prefix))
        .order_by(e.revision, e.sub)
    )
    rows = conn.execute(query.limit(batch)).all()
    if len(rows) == batch:
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
