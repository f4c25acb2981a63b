"""The etcd backend on a real three-member cluster: requests, watches and leases fail over when a
member dies, reads ride out a leader election, and `wait_limit` bounds a wait for a dead store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.support.waiting import eventually
from tether.store import StoreUnavailable, WatchEvent, open_store
from tether.store.base import wait_limit
from tether.store.etcd_server import EtcdCluster, EtcdServer
from tether.store.lease import LeaseKeeper


@pytest.fixture
def cluster() -> Iterator[EtcdCluster]:
    with EtcdCluster(3, on_tmpfs=True) as started:
        yield started


def leader(cluster: EtcdCluster) -> EtcdServer:
    current = cluster.leader()
    assert current is not None, "the members do not agree on a leader"
    return current


async def test_requests_and_leases_fail_over_and_a_restarted_member_catches_up(
    cluster: EtcdCluster,
) -> None:
    # The member in use (the first endpoint) dies, not the leader: a write in flight to a
    # dead leader may wait out etcd's request timeout (7 s), which the test of elections below
    # covers for reads.
    first = next(m for m in cluster.members if m is not leader(cluster))
    others = [m for m in cluster.members if m is not first]
    url = "etcd://" + ",".join(f"127.0.0.1:{m.client_port}" for m in (first, *others))
    async with open_store(url) as store:
        await store.put("/k/before", b"1")
        # A TTL of 3 s leaves the failover and the resent renewal room on a loaded machine.
        keeper = LeaseKeeper(store, ttl_s=3)
        lease = await keeper.start()
        await store.put("/k/leased", b"x", lease=lease)
        first.kill()
        started = time.monotonic()
        # Both are sent again after failing on the dead member's connection: a read, and a
        # put (applying it twice leaves the same state).
        assert (await store.get("/k/before")) is not None
        await store.put("/k/during", b"2")
        assert time.monotonic() - started < 5
        # The lease is renewed through another member: a renewal sent after the kill succeeds.
        await eventually(
            lambda: keeper.renewed_at,
            lambda renewed_at: renewed_at > started,
            timeout_s=5,
            what="a renewal sent after the kill",
        )
        assert not keeper.lost.is_set()
        assert (await store.get("/k/leased")) is not None
        await keeper.stop()
    await asyncio.to_thread(first.start)
    async with open_store(first.url) as alone:
        kv = await alone.get("/k/during")
        assert kv is not None
        assert kv.value == b"2"


async def test_a_watch_fails_over_and_delivers_every_revision_once(cluster: EtcdCluster) -> None:
    cluster.move_leader(cluster.members[1])
    async with open_store(cluster.url) as store:
        start = await store.revision() + 1
        expected = [await store.put(f"/w/{i}", b"before") for i in range(10)]
        seen: list[WatchEvent] = []
        async with store.watch("/w/", start_revision=start) as watch:

            async def consume(count: int) -> None:
                async for revision in watch:
                    seen.extend(revision)
                    if len(seen) >= count:
                        return

            await asyncio.wait_for(consume(10), 10)
            cluster.members[0].kill()
            await store.get("/w/0")  # reconnects elsewhere (see the test above)
            expected += [await store.put(f"/w/{i}", b"after") for i in range(10)]
            await asyncio.wait_for(consume(20), 30)
    assert [event.revision for event in seen] == expected


async def test_reads_ride_out_the_election_after_the_leader_dies(cluster: EtcdCluster) -> None:
    leading = leader(cluster)
    follower = next(m for m in cluster.members if m is not leading)
    # The client talks to a follower, which answers reads by asking the leader: while the
    # others elect a new one it fails them ("leader changed", "no leader"), and they are sent
    # again.
    async with open_store(follower.url) as store:
        await store.put("/r/x", b"1")
        failures = 0
        deadline = time.monotonic() + 3
        leading.kill()
        while time.monotonic() < deadline:
            try:
                assert await store.get("/r/x") is not None
                assert await store.count("/r/") == 1
            except StoreUnavailable:
                failures += 1
        assert failures == 0


async def test_wait_limit_bounds_a_request_to_a_dead_store(etcd_server: EtcdServer) -> None:
    async with open_store(etcd_server.url) as store:
        await store.put("/x", b"1")
        etcd_server.kill()
        started = time.monotonic()
        with wait_limit(0.5), pytest.raises(StoreUnavailable):
            await store.get("/x")
        assert time.monotonic() - started < 2
