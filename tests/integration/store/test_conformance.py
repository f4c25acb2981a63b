"""The store conformance suite: every test runs unchanged against real etcd, real SQLite and the
SQL store on a real PostgreSQL server."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import EVERY_BACKEND, empty_store
from tether.store import (
    CompactedError,
    Compare,
    CompareOp,
    CompareTarget,
    Delete,
    DeleteResult,
    EventType,
    Get,
    LeaseNotFound,
    Put,
    RangeResult,
    Store,
    StoreError,
    Watch,
    WatchEvent,
    key_missing,
    mod_revision_is,
    open_store,
    value_is,
)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(params=EVERY_BACKEND)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with empty_store(request.param, request, tmp_path) as url:
        yield url


async def collect(watch: Watch, count: int, timeout_s: float = 10.0) -> list[WatchEvent]:
    """Whole revisions from `watch` until at least `count` events; fails if they are late."""
    events: list[WatchEvent] = []

    async def take() -> None:
        async for revision in watch:
            assert revision, "a watch never yields an empty revision"
            assert {event.revision for event in revision} == {revision[0].revision}
            events.extend(revision)
            if len(events) >= count:
                return

    try:
        await asyncio.wait_for(take(), timeout_s)
    except TimeoutError:
        pytest.fail(f"watch delivered {len(events)} of {count} events in {timeout_s} s")
    return events


def summary(events: list[WatchEvent]) -> list[tuple[str, str, int]]:
    return [(e.type.value, e.kv.key, e.revision) for e in events]


# --- reads and writes -----------------------------------------------------------------------


async def test_put_get_tracks_revisions_and_versions(store: Store) -> None:
    first = await store.put("/k/a", b"1")
    second = await store.put("/k/a", b"2")
    assert second == first + 1
    kv = await store.get("/k/a")
    assert kv is not None
    assert (kv.value, kv.create_revision, kv.mod_revision, kv.version) == (b"2", first, second, 2)
    assert await store.get("/k/missing") is None
    assert await store.revision() == second


async def test_range_is_ordered_and_bounded_by_the_prefix(store: Store) -> None:
    for key in ("/jobs/b", "/jobs/a", "/jobs-x/c", "/jobsz", "/job/d", "/jobs/a/1"):
        await store.put(key, key.encode())
    result = await store.range("/jobs/")
    assert [kv.key for kv in result.kvs] == ["/jobs/a", "/jobs/a/1", "/jobs/b"]
    assert result.revision == await store.revision()
    assert not result.more
    assert await store.count("/jobs/") == 3
    assert await store.count("/jobs") == 5
    assert await store.count("/none/") == 0


async def test_range_pages_through_one_snapshot(store: Store) -> None:
    for i in range(25):
        await store.put(f"/m/{i:03d}", b"v1")
    first = await store.range("/m/", limit=10)
    assert len(first.kvs) == 10
    assert first.more
    # Writes between pages must not show in later pages read at the first page's revision.
    await store.put("/m/015", b"v2")
    await store.delete("/m/020")
    await store.put("/m/100", b"new")
    keys, values = [kv.key for kv in first.kvs], [kv.value for kv in first.kvs]
    page = first
    while page.more:
        page = await store.range("/m/", start_after=keys[-1], limit=10, revision=first.revision)
        keys += [kv.key for kv in page.kvs]
        values += [kv.value for kv in page.kvs]
    assert keys == [f"/m/{i:03d}" for i in range(25)]
    assert set(values) == {b"v1"}
    now = await store.range("/m/")
    assert len(now.kvs) == 25  # 24 old + /m/100
    assert (await store.get("/m/015")) is not None


async def test_range_at_an_older_revision_sees_the_past(store: Store) -> None:
    created = await store.put("/h/a", b"old")
    await store.put("/h/b", b"b")
    await store.put("/h/a", b"new")
    await store.delete("/h/b")
    past = await store.range("/h/", revision=created)
    assert [(kv.key, kv.value, kv.mod_revision) for kv in past.kvs] == [("/h/a", b"old", created)]
    assert past.revision == created
    with pytest.raises(StoreError, match="future"):
        await store.range("/h/", revision=await store.revision() + 10)


# --- transactions ---------------------------------------------------------------------------

COMPARE_CASES = [
    # (target, op, operand that holds, operand that does not) for a key with value b"m",
    # version 2, created at `c`, last modified at `m` (revisions resolved in the test).
    (CompareTarget.VALUE, CompareOp.EQUAL, b"m", b"x"),
    (CompareTarget.VALUE, CompareOp.NOT_EQUAL, b"x", b"m"),
    (CompareTarget.VALUE, CompareOp.GREATER, b"a", b"z"),
    (CompareTarget.VALUE, CompareOp.LESS, b"z", b"a"),
    (CompareTarget.VERSION, CompareOp.EQUAL, 2, 1),
    (CompareTarget.VERSION, CompareOp.NOT_EQUAL, 1, 2),
    (CompareTarget.VERSION, CompareOp.GREATER, 1, 2),
    (CompareTarget.VERSION, CompareOp.LESS, 3, 2),
    (CompareTarget.CREATE_REVISION, CompareOp.EQUAL, "c", "m"),
    (CompareTarget.CREATE_REVISION, CompareOp.NOT_EQUAL, "m", "c"),
    (CompareTarget.CREATE_REVISION, CompareOp.GREATER, 0, "c"),
    (CompareTarget.CREATE_REVISION, CompareOp.LESS, "m", "c"),
    (CompareTarget.MOD_REVISION, CompareOp.EQUAL, "m", "c"),
    (CompareTarget.MOD_REVISION, CompareOp.NOT_EQUAL, "c", "m"),
    (CompareTarget.MOD_REVISION, CompareOp.GREATER, "c", "m"),
    (CompareTarget.MOD_REVISION, CompareOp.LESS, 10_000, "m"),
]


@pytest.mark.parametrize(
    ("target", "op", "holds", "fails"),
    COMPARE_CASES,
    ids=[f"{t.value}{o.value}" for t, o, _, _ in COMPARE_CASES],
)
async def test_compare_and_swap_for_every_compare_kind(
    store: Store,
    target: CompareTarget,
    op: CompareOp,
    holds: int | bytes | str,
    fails: int | bytes | str,
) -> None:
    created = await store.put("/cas/key", b"first")
    modified = await store.put("/cas/key", b"m")
    revisions = {"c": created, "m": modified}

    def operand(value: int | bytes | str) -> int | bytes:
        return revisions[value] if isinstance(value, str) else value

    ok = await store.txn(
        [Compare("/cas/key", target, op, operand(holds))],
        [Put("/cas/result", b"success")],
        [Put("/cas/result", b"failure")],
    )
    assert ok.succeeded
    assert (await store.get("/cas/result")).value == b"success"  # type: ignore[union-attr]
    not_ok = await store.txn(
        [Compare("/cas/key", target, op, operand(fails))],
        [Put("/cas/result", b"success2")],
        [Put("/cas/result", b"failure")],
    )
    assert not not_ok.succeeded
    assert (await store.get("/cas/result")).value == b"failure"  # type: ignore[union-attr]


async def test_compares_on_a_missing_key(store: Store) -> None:
    assert (await store.txn([key_missing("/nope")], [])).succeeded
    assert (await store.txn([mod_revision_is("/nope", 0)], [])).succeeded
    # A value compare never holds for a missing key, whatever the operator.
    assert not (await store.txn([value_is("/nope", b"")], [])).succeeded
    assert not (
        await store.txn([Compare("/nope", CompareTarget.VALUE, CompareOp.NOT_EQUAL, b"x")], [])
    ).succeeded
    assert await store.create("/nope", b"1")
    assert not await store.create("/nope", b"2")
    assert (await store.get("/nope")).value == b"1"  # type: ignore[union-attr]


async def test_multi_key_transaction_is_atomic(store: Store) -> None:
    await store.put("/acct/guard", b"open")
    done = await store.txn(
        [value_is("/acct/guard", b"open")],
        [Put("/acct/a", b"1"), Put("/acct/b", b"2"), Delete("/acct/guard"), Get("/acct/a")],
    )
    assert done.succeeded
    a, b = await store.get("/acct/a"), await store.get("/acct/b")
    assert a is not None
    assert b is not None
    assert a.mod_revision == b.mod_revision == done.revision
    assert await store.get("/acct/guard") is None
    read = done.results[3]
    assert isinstance(read, RangeResult)
    assert [kv.value for kv in read.kvs] == [b"1"]
    # A failed compare writes none of the branch.
    failed = await store.txn(
        [value_is("/acct/guard", b"open")], [Put("/acct/a", b"X"), Put("/acct/c", b"X")]
    )
    assert not failed.succeeded
    assert failed.revision == done.revision
    assert (await store.get("/acct/a")).value == b"1"  # type: ignore[union-attr]
    assert await store.get("/acct/c") is None


async def test_readers_never_see_half_a_transaction(store: Store) -> None:
    await store.txn([], [Put("/bank/a", b"100"), Put("/bank/b", b"0")])

    async def transfer() -> None:
        for _ in range(60):
            kvs = {kv.key: kv for kv in (await store.range("/bank/")).kvs}
            a, b = kvs["/bank/a"], kvs["/bank/b"]
            await store.txn(
                [mod_revision_is(a.key, a.mod_revision), mod_revision_is(b.key, b.mod_revision)],
                [
                    Put(a.key, str(int(a.value) - 1).encode()),
                    Put(b.key, str(int(b.value) + 1).encode()),
                ],
            )

    async def audit() -> int:
        checks = 0
        while not writer.done():
            kvs = (await store.range("/bank/")).kvs
            assert sum(int(kv.value) for kv in kvs) == 100, kvs
            checks += 1
            await asyncio.sleep(0)
        return checks

    writer = asyncio.create_task(transfer())
    assert await audit() > 0
    await writer
    assert (await store.get("/bank/b")).value == b"60"  # type: ignore[union-attr]


async def test_transaction_writing_a_key_twice_is_refused(store: Store) -> None:
    before = await store.revision()
    with pytest.raises(StoreError, match="duplicate key"):
        await store.txn([], [Put("/dup", b"1"), Put("/dup", b"2")])
    assert await store.get("/dup") is None
    assert await store.revision() == before


async def test_delete_prefix_counts_and_spares_neighbours(store: Store) -> None:
    for key in ("/d/1", "/d/2", "/d/3", "/d-other"):
        await store.put(key, b"x")
    assert await store.delete("/d/", prefix=True) == 3
    assert await store.delete("/d/1") == 0
    remaining = await store.range("/d")
    assert [kv.key for kv in remaining.kvs] == ["/d-other"]
    result = (await store.txn([], [Delete("/d-other")])).results[0]
    assert result == DeleteResult(1)


# --- leases ---------------------------------------------------------------------------------

LEASE_TTL = 3  # etcd raises TTLs below ~2 s to its minimum; 3 s is honoured by both backends


async def test_lease_expires_its_keys_within_a_second_of_its_ttl(store: Store) -> None:
    # The TTL runs from a moment between `asked` and `granted`: the key must outlive the first
    # and be gone a second after the second.
    loop = asyncio.get_running_loop()
    asked = loop.time()
    lease = await store.lease_grant(LEASE_TTL)
    granted = loop.time()
    await store.put("/hb/m1", b"alive", lease=lease)
    await store.put("/hb/m2", b"no lease")
    assert (await store.get("/hb/m1")).lease == lease  # type: ignore[union-attr]
    await asyncio.sleep(max(0.0, asked + LEASE_TTL - 0.5 - loop.time()))
    # Gone is an early expiry only if the answer came before the TTL could have run out: a
    # stall may delay the read past it.
    found = await store.get("/hb/m1")
    answered = loop.time()
    assert found is not None or answered >= asked + LEASE_TTL, "expired before its TTL"
    while await store.get("/hb/m1") is not None:
        assert loop.time() - granted < LEASE_TTL + 1.0, "still there a second after the TTL"
        await asyncio.sleep(0.05)
    assert await store.get("/hb/m2") is not None
    with pytest.raises(LeaseNotFound):
        await store.lease_keepalive(lease)


async def test_keepalive_keeps_a_lease_alive(store: Store) -> None:
    lease = await store.lease_grant(LEASE_TTL)
    await store.put("/hb/kept", b"alive", lease=lease)
    for _ in range(10):  # 5 s, well past the TTL
        assert await store.lease_keepalive(lease) >= LEASE_TTL
        await asyncio.sleep(0.5)
    assert await store.get("/hb/kept") is not None


async def test_time_to_live_counts_down_and_ends_with_the_lease(store: Store) -> None:
    lease = await store.lease_grant(30)
    left = await store.lease_time_to_live(lease)
    assert left is not None
    assert 28 <= left <= 30
    await store.lease_revoke(lease)
    assert await store.lease_time_to_live(lease) is None
    assert await store.lease_time_to_live(lease + 12345) is None


async def test_revoke_deletes_the_lease_keys_at_once(store: Store) -> None:
    lease = await store.lease_grant(30)
    await store.put("/hb/a", b"1", lease=lease)
    await store.put("/hb/b", b"2", lease=lease)
    await store.lease_revoke(lease)
    assert (await store.range("/hb/")).kvs == []
    await store.lease_revoke(lease)  # revoking again is harmless
    with pytest.raises(LeaseNotFound):
        await store.put("/hb/c", b"3", lease=lease)
    assert await store.get("/hb/c") is None


# --- watch ----------------------------------------------------------------------------------


async def write_history(store: Store) -> tuple[int, list[tuple[str, str, int]]]:
    """A mix of puts, deletes and multi-key transactions; returns (start, expected events)."""
    start = await store.revision() + 1
    expected: list[tuple[str, str, int]] = []
    for i in range(40):
        rev = await store.put(f"/w/{i % 7}", str(i).encode())
        expected.append(("put", f"/w/{i % 7}", rev))
        await store.put(f"/elsewhere/{i}", b"not watched")
        if i % 10 == 9:
            result = await store.txn([], [Put("/w/x", b"1"), Put("/w/y", b"2")])
            expected += [("put", "/w/x", result.revision), ("put", "/w/y", result.revision)]
            result = await store.txn([], [Delete("/w/x"), Delete("/w/y")])
            expected += [("delete", "/w/x", result.revision), ("delete", "/w/y", result.revision)]
    return start, expected


async def test_watch_from_a_revision_delivers_every_event_once_in_order(store: Store) -> None:
    start, expected = await write_history(store)
    async with store.watch("/w/", start_revision=start) as watch:
        events = await collect(watch, len(expected))
        assert summary(events) == expected
        # Nothing else arrives; a new write does.
        rev = await store.put("/w/late", b"late")
        [late] = await collect(watch, 1)
        assert (late.type, late.kv.key, late.kv.value, late.revision) == (
            EventType.PUT,
            "/w/late",
            b"late",
            rev,
        )


async def test_live_watch_sees_concurrent_writes_once(store: Store) -> None:
    start = await store.revision() + 1
    async with store.watch("/live/", start_revision=start) as watch:
        reader = asyncio.create_task(collect(watch, 150))
        expected = [
            ("put", f"/live/{i % 5}", await store.put(f"/live/{i % 5}", b"v")) for i in range(150)
        ]
        assert summary(await reader) == expected


async def test_watch_resumes_after_a_reconnect_without_loss_or_repeat(
    store: Store, store_url: str
) -> None:
    start, expected = await write_history(store)
    async with store.watch("/w/", start_revision=start) as watch:
        first = await collect(watch, 30)
        resume_at = watch.next_revision
    # Another client (a new connection) resumes where the first stopped.
    async with open_store(store_url) as other, other.watch("/w/", start_revision=resume_at) as w2:
        rest = await collect(w2, len(expected) - len(first))
    assert summary(first + rest) == expected


async def test_watching_a_compacted_revision_raises_a_clear_error(store: Store) -> None:
    old = await store.put("/c/a", b"1")
    for i in range(5):
        await store.put("/c/a", str(i).encode())
    point = await store.put("/c/b", b"kept")
    await store.compact(point)
    with pytest.raises(CompactedError, match="compacted"):
        async with store.watch("/c/", start_revision=old) as watch:
            await collect(watch, 1)
    with pytest.raises(CompactedError):
        await store.range("/c/", revision=old)
    # From the compaction point on, history is intact, and reads there still see every key.
    async with store.watch("/c/", start_revision=point) as watch:
        [event] = await collect(watch, 1)
        assert (event.kv.key, event.revision) == ("/c/b", point)
    at_point = await store.range("/c/", revision=point)
    assert [(kv.key, kv.value) for kv in at_point.kvs] == [("/c/a", b"4"), ("/c/b", b"kept")]


# --- many processes -------------------------------------------------------------------------


async def test_eight_processes_compare_and_swap_without_a_lost_update(store_url: str) -> None:
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.cas_worker",
            store_url,
            "/counter",
            "200",
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(8)
    ]
    for process in processes:
        _out, err = await asyncio.wait_for(process.communicate(), 150)
        assert process.returncode == 0, err.decode()
    async with open_store(store_url) as check:
        counter = await check.get("/counter")
    assert counter is not None
    assert int(counter.value) == 1600
    assert counter.version == 1600


async def test_a_watch_sees_writes_made_by_another_process(store: Store, store_url: str) -> None:
    start = await store.revision() + 1
    async with store.watch("/counter", start_revision=start) as watch:
        writer = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.support.cas_worker",
            store_url,
            "/counter",
            "25",
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        events = await collect(watch, 25, timeout_s=60)
        _out, err = await writer.communicate()
        assert writer.returncode == 0, err.decode()
    assert [event.kv.value for event in events] == [str(i).encode() for i in range(1, 26)]
