"""The SQLite probe (store/sql_probe.py) against a real store file: it reports every commit and
nothing else, lists expired leases, and says busy, never waits, when the file is locked; and
the waker (store/sql_wake.py) fires on another process's commit, not on reads."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from inotify_simple import INotify, flags

from tests.integration.store.test_conformance import REPO, collect
from tether.store.base import StoreError
from tether.store.sql import SqlStore
from tether.store.sql_probe import ProbeBusy, SqliteProbe
from tether.store.sql_wake import FileWaker


@pytest.fixture
async def sql_store(tmp_path: Path) -> AsyncIterator[SqlStore]:
    store = SqlStore(f"sqlite:///{tmp_path / 'region.db'}")
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def probe(sql_store: SqlStore, tmp_path: Path) -> Iterator[SqliteProbe]:
    opened = SqliteProbe(tmp_path / "region.db")
    try:
        yield opened
    finally:
        opened.close()


async def test_the_probe_reports_the_revision_only_after_a_commit(
    sql_store: SqlStore, probe: SqliteProbe
) -> None:
    assert probe.revision_if_changed() == await sql_store.revision()
    assert probe.revision_if_changed() is None
    revision = await sql_store.put("/p/a", b"1")
    assert probe.revision_if_changed() == revision
    assert probe.revision_if_changed() is None
    # Leases live in a file of their own: granting and renewing one commits nothing here.
    lease = await sql_store.lease_grant(5)
    await sql_store.lease_keepalive(lease)
    assert probe.revision_if_changed() is None
    # Its expiry deletes its keys, here.
    held = await sql_store.put("/p/held", b"1", lease=lease)
    assert probe.revision_if_changed() == held
    await sql_store.lease_revoke(lease)
    assert probe.revision_if_changed() == held + 1
    assert probe.revision_if_changed() is None


async def test_housekeeping_lists_the_leases_past_their_time(
    sql_store: SqlStore, probe: SqliteProbe
) -> None:
    # TTLs far longer than the test takes: a lease is past its time only at the moments probed.
    short = await sql_store.lease_grant(30)
    long = await sql_store.lease_grant(600)
    revision = await sql_store.put("/p/a", b"1", lease=long)
    now = probe.housekeeping(time.time(), 500)
    assert now.expired == []
    assert (now.revision, now.compacted) == (revision, 0)
    # The next expiry is the short lease's, then the long one's once the short one is past.
    assert now.next_expiry is not None
    assert 29 < now.next_expiry - time.time() <= 30
    later = probe.housekeeping(time.time() + 31, 500)
    assert later.next_expiry is not None
    assert 500 < later.next_expiry - time.time() <= 600
    assert probe.housekeeping(time.time() + 601, 500).next_expiry is None
    # The slow path, a pooled transaction, says the same.
    assert sql_store._housekeeping_sync().next_expiry == now.next_expiry
    assert probe.housekeeping(time.time() + 31, 500).expired == [short]
    assert sorted(probe.housekeeping(time.time() + 601, 500).expired) == sorted([short, long])
    assert len(probe.housekeeping(time.time() + 601, 1).expired) == 1


async def test_a_lease_left_by_a_closed_store_expires_on_time_in_another(tmp_path: Path) -> None:
    # Maintenance looks when the next lease it knows of expires (or a second after its last
    # look), not four times a second: a lease granted by another process, which then died
    # (its store closed without revoking), still expires by the other's maintenance.
    url = f"sqlite:///{tmp_path / 'region.db'}"
    survivor, holder = SqlStore(url), SqlStore(url)
    try:
        await survivor.put("/p/started", b"")  # its maintenance runs from its first request
        lease = await holder.lease_grant(2)
        granted = time.monotonic()
        await holder.put("/p/held", b"1", lease=lease)
        await holder.close()
        while await survivor.get("/p/held") is not None:
            assert time.monotonic() - granted < 2 + 1.5, "still there long after its TTL"
            await asyncio.sleep(0.05)
        assert time.monotonic() - granted >= 1.9, "expired before its TTL"
    finally:
        await survivor.close()
        await holder.close()


async def test_a_watch_opened_while_maintenance_waits_hears_the_next_write_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a watch, maintenance waits only for housekeeping (here: long); a watch opened
    # meanwhile must not wait that long for another process's write.
    monkeypatch.setattr("tether.store.sql._HOUSEKEEPING_MAX_S", 30.0)
    url = f"sqlite:///{tmp_path / 'region.db'}"
    watching, writing = SqlStore(url), SqlStore(url)
    try:
        start = await watching.revision() + 1  # its maintenance starts
        await asyncio.sleep(0.1)  # and waits, with no watch open
        async with watching.watch("/w/", start_revision=start) as watch:
            # The store's own write wakes its watch directly, maintenance or not.
            await watching.put("/w/0", b"0")
            async with asyncio.timeout(10):
                first = await anext(watch)
            # Another store's write reaches the watch only through maintenance.
            await writing.put("/w/1", b"1")
            async with asyncio.timeout(10):
                events = await anext(watch)
        assert [event.kv.key for event in first] == ["/w/0"]
        assert [event.kv.key for event in events] == ["/w/1"]
    finally:
        await watching.close()
        await writing.close()


async def test_a_commit_not_yet_visible_when_the_file_was_written_is_still_heard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite writes a commit's last page to the log, then makes it visible in shared memory
    # (which raises no file event): a look woken by the write may come between the two and see
    # nothing. Here the first look that would see the other store's commit sees nothing, as if
    # it had come in that moment; the watch must hear the commit anyway, long before
    # housekeeping (here: 30 s) would look again.
    monkeypatch.setattr("tether.store.sql._HOUSEKEEPING_MAX_S", 30.0)
    revision_if_changed = SqliteProbe.revision_if_changed
    looks_hidden: list[int] = []

    def early_look(probe: SqliteProbe) -> int | None:
        before = probe._data_version
        revision = revision_if_changed(probe)
        if revision is not None and hiding and not looks_hidden:
            probe._data_version = before
            looks_hidden.append(revision)
            return None
        return revision

    monkeypatch.setattr(SqliteProbe, "revision_if_changed", early_look)
    url = f"sqlite:///{tmp_path / 'region.db'}"
    watching, writing = SqlStore(url), SqlStore(url)
    hiding = False
    try:
        start = await watching.revision() + 1
        async with watching.watch("/w/", start_revision=start) as watch:
            await watching.put("/w/0", b"0")
            async with asyncio.timeout(10):
                await anext(watch)
            hiding = True
            written = await writing.put("/w/1", b"1")
            async with asyncio.timeout(5):
                events = await anext(watch)
        assert looks_hidden == [written], "no look came between the write and the watch's read"
        assert [event.kv.key for event in events] == ["/w/1"]
    finally:
        await watching.close()
        await writing.close()


async def test_a_locked_file_makes_the_probe_busy_at_once(tmp_path: Path) -> None:
    path = tmp_path / "region.db"
    store = SqlStore(f"sqlite:///{path}")
    revision = await store.put("/p/a", b"1")
    await store.close()
    # An exclusive lock that stays until the connection closes (only with no other connection).
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("PRAGMA locking_mode=EXCLUSIVE")
    locker.execute("BEGIN EXCLUSIVE")
    locker.execute("COMMIT")
    probe = SqliteProbe(path)
    try:
        started = time.monotonic()
        with pytest.raises(ProbeBusy, match="locked"):
            probe.revision_if_changed()
        with pytest.raises(ProbeBusy):
            probe.housekeeping(time.time(), 500)
        assert time.monotonic() - started < 1
        locker.close()
        assert probe.revision_if_changed() == revision
    finally:
        locker.close()
        probe.close()


def test_a_file_without_the_stores_tables_is_an_error_not_busy(tmp_path: Path) -> None:
    probe = SqliteProbe(tmp_path / "empty.db")
    try:
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            probe.revision_if_changed()
    finally:
        probe.close()


async def test_the_waker_fires_on_another_processs_commit_and_only_then(
    sql_store: SqlStore, tmp_path: Path
) -> None:
    waker = FileWaker(tmp_path / "region.db")
    try:
        assert not await waker.wait(0)  # nothing written since it began to watch
        writer = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.cas_worker",
            f"sqlite:///{tmp_path / 'region.db'}",
            "/counter",
            "1",
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _out, err = await writer.communicate()
        assert writer.returncode == 0, err.decode()
        assert await waker.wait(30)
        # Reading the file is no write.
        assert await sql_store.get("/counter") is not None
        assert not await waker.wait(0)
    finally:
        waker.close()


async def test_granting_renewing_and_revoking_leases_writes_no_file_the_waker_sees(
    sql_store: SqlStore, tmp_path: Path
) -> None:
    # The waker watches the store's directory; every process wakes on what it reports, and
    # leases are renewed every few seconds by every service of a region.
    watcher = INotify()
    watcher.add_watch(tmp_path, flags.MODIFY | flags.CREATE | flags.MOVED_TO)
    try:
        lease = await sql_store.lease_grant(5)
        for _ in range(3):
            await sql_store.lease_keepalive(lease)
        await sql_store.lease_revoke(lease)
        # Events come in order: once the sentinel's is read, every write before it was.
        (tmp_path / "sentinel").write_bytes(b"")
        names: list[str] = []
        while "sentinel" not in names:
            names += [event.name for event in watcher.read(timeout=10_000)]
        assert names == ["sentinel"]
    finally:
        watcher.close()


async def test_the_leases_of_a_store_from_before_their_own_file_move_there(
    tmp_path: Path,
) -> None:
    path = tmp_path / "region.db"
    await SqlStore(f"sqlite:///{path}").close()
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE tether_leases (id BIGINT PRIMARY KEY, ttl INT, expires_at FLOAT)")
    old.execute("INSERT INTO tether_leases VALUES (77, 30, ?)", (time.time() + 30,))
    old.commit()
    old.close()
    store = SqlStore(f"sqlite:///{path}")
    try:
        ttl = await store.lease_time_to_live(77)
        assert ttl is not None
        assert 25 <= ttl <= 30
        assert await store.lease_keepalive(77) == 30
    finally:
        await store.close()
    tables = sqlite3.connect(path).execute("SELECT name FROM sqlite_master").fetchall()
    assert ("tether_leases",) not in tables


async def test_the_probe_says_when_nothing_under_a_prefix_changed(
    sql_store: SqlStore, probe: SqliteProbe
) -> None:
    start = await sql_store.revision() + 1
    await sql_store.put("/b/1", b"x")
    await sql_store.put("/a0", b"beside the prefix, not under it")
    last = await sql_store.put("/b/2", b"y")
    assert probe.untouched_until("/a/", start) == last
    mine = await sql_store.put("/a/1", b"z")
    assert probe.untouched_until("/a/", start) is None
    assert probe.untouched_until("/a/", mine) is None
    assert probe.untouched_until("/a/", mine + 1) == mine


async def test_a_watch_skips_other_prefixes_writes_and_misses_none_of_its_own(
    sql_store: SqlStore,
) -> None:
    start = await sql_store.revision() + 1
    async with sql_store.watch("/a/", start_revision=start) as watch:
        expected = []
        for round_ in range(5):
            for other in range(4):
                await sql_store.put(f"/b/{round_}-{other}", b"")
            expected.append(f"/a/{round_}")
            await sql_store.put(expected[-1], b"")
        events = await collect(watch, len(expected))
    assert [event.kv.key for event in events] == expected


@pytest.mark.timeout(30)  # the spin described below never yields to asyncio's timeouts
async def test_a_watch_ends_when_its_store_closes_after_skipping_other_writes(
    tmp_path: Path,
) -> None:
    # A watch that had just skipped another prefix's write once spun on the probe, holding the
    # event loop, for as long as its task lived when the store closed under it.
    store = SqlStore(f"sqlite:///{tmp_path / 'region.db'}")
    start = await store.revision() + 1
    watch = store.watch("/a/", start_revision=start)
    pending = asyncio.ensure_future(anext(watch))
    await store.put("/b/other", b"")
    await asyncio.sleep(0.2)  # the watch wakes, skips the write, and waits again
    assert not pending.done()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        async with asyncio.timeout(5):
            await pending
