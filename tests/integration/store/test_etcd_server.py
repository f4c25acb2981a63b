"""The local etcd server that `tether up --etcd` and the benchmarks start: it compacts its own
history and snapshots often, so a long-running region's etcd does not grow without end."""

from __future__ import annotations

from tests.support.waiting import eventually
from tether.store import CompactedError, open_store
from tether.store.etcd_server import ETCD_HISTORY_RETENTION, ETCD_SNAPSHOT_COUNT, EtcdServer


async def test_a_local_etcd_compacts_history_older_than_its_retention() -> None:
    assert ETCD_HISTORY_RETENTION == "5m"  # what docs/operator-guide.md ("Choosing the store") says
    with EtcdServer(on_tmpfs=True, history_retention="1s") as server:
        async with open_store(server.url) as store:
            old = await store.put("/h/a", b"1")
            await store.put("/h/a", b"2")
            assert [kv.value for kv in (await store.range("/h/", revision=old)).kvs] == [b"1"]

            async def old_revision_gone() -> bool:
                await store.put("/h/tick", b"")  # history to compact up to
                try:
                    await store.range("/h/", revision=old)
                except CompactedError:
                    return True
                return False

            await eventually(old_revision_gone, bool, timeout_s=20, what="compaction")
            # The latest value of every key is kept.
            latest = await store.get("/h/a")
            assert latest is not None
            assert latest.value == b"2"


async def test_a_local_etcd_snapshots_after_its_snapshot_count() -> None:
    # A snapshot lets etcd drop the raft entries it held in memory since the last one.
    assert ETCD_SNAPSHOT_COUNT == 10_000  # what docs/operator-guide.md ("Choosing the store") says
    with EtcdServer(on_tmpfs=True, snapshot_count=50) as server:
        snapshots = server.data_dir / "data" / "member" / "snap"
        async with open_store(server.url) as store:
            for number in range(60):
                await store.put(f"/s/{number}", b"x")

            def snapshotted() -> bool:
                return any(path.suffix == ".snap" for path in snapshots.iterdir())

            await eventually(snapshotted, timeout_s=10, what="a snapshot file")
