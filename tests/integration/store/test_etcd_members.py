"""Which member the etcd client talks to, on a real three-member cluster: a member that stops
answering is left for a healthy one, with requests, watches and leases going on; a member that
answers without a leader counts as unhealthy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from tests.support.waiting import eventually
from tether.store import Put, key_missing
from tether.store.base import wait_limit
from tether.store.etcd import EtcdStore
from tether.store.etcd_server import EtcdCluster, EtcdServer
from tether.store.lease import LeaseKeeper


@pytest.fixture
def cluster() -> Iterator[EtcdCluster]:
    with EtcdCluster(3, on_tmpfs=True) as started:
        yield started


def url_starting_with(cluster: EtcdCluster, first: EtcdServer) -> str:
    ordered = [first, *(m for m in cluster.members if m is not first)]
    return "etcd://" + ",".join(f"127.0.0.1:{m.client_port}" for m in ordered)


async def test_a_member_that_stops_answering_is_left_and_requests_go_on(
    cluster: EtcdCluster,
) -> None:
    leading = cluster.leader()
    first = next(m for m in cluster.members if m is not leading)
    store = EtcdStore(url_starting_with(cluster, first))
    try:
        await store.put("/m/before", b"1")
        keeper = LeaseKeeper(store, ttl_s=3)
        await store.put("/m/leased", b"x", lease=await keeper.start())
        start = await store.revision() + 1
        async with store.watch("/m/w/", start_revision=start) as watch:
            first.pause()
            paused_at = time.monotonic()
            # Each request is answered well within the deadline: the client leaves the silent
            # member (in-flight requests sent again elsewhere) instead of waiting on it.
            with wait_limit(6):
                assert await store.get("/m/before") is not None
                await store.put("/m/w/1", b"blind")
                assert await store.create("/m/w/2", b"compared")
                result = await store.txn([key_missing("/m/w/3")], [Put("/m/w/3", b"cas")])
                assert result.succeeded
            assert store._members.address != f"127.0.0.1:{first.client_port}"
            keys: list[str] = []
            while len(keys) < 3:
                events = await asyncio.wait_for(anext(aiter(watch)), 10)
                keys += [event.kv.key for event in events]
            assert keys == ["/m/w/1", "/m/w/2", "/m/w/3"]
        # The lease is renewed through the new member: a renewal sent after the pause succeeds.
        await eventually(
            lambda: keeper.renewed_at,
            lambda renewed_at: renewed_at > paused_at,
            timeout_s=5,
            what="a renewal sent after the pause",
        )
        assert not keeper.lost.is_set()
        assert await store.get("/m/leased") is not None
        await keeper.stop()
    finally:
        first.resume()
        await store.close()


async def test_a_short_lease_outlives_a_member_that_stops_answering_before_its_renewal(
    cluster: EtcdCluster,
) -> None:
    # The agents' lease TTL in the tests (2 s), and the worst moment: the member stops just
    # before a renewal is due, so the renewal waits on it and the lease has the least time left.
    leading = cluster.leader()
    first = next(m for m in cluster.members if m is not leading)
    store = EtcdStore(url_starting_with(cluster, first))
    renewals: asyncio.Queue[float] = asyncio.Queue()
    keeper = LeaseKeeper(store, ttl_s=2, renewed=lambda _lease, at: renewals.put_nowait(at))

    async def renewal_after(moment: float) -> float:
        while (at := await renewals.get()) <= moment:
            pass
        return at

    try:
        await store.put("/m/short", b"x", lease=await keeper.start())
        last = await asyncio.wait_for(renewals.get(), 5)
        await asyncio.sleep(max(0.0, last + 2 / 3 - 0.05 - time.monotonic()))
        first.pause()
        paused_at = time.monotonic()
        # A renewal sent after the pause succeeds (through another member); had the lease
        # expired meanwhile, none would.
        await asyncio.wait_for(renewal_after(paused_at), 5)
        assert not keeper.lost.is_set()
        assert await store.get("/m/short") is not None
    finally:
        first.resume()
        await keeper.stop()
        await store.close()


async def test_a_member_without_a_leader_is_unhealthy(cluster: EtcdCluster) -> None:
    alone, *others = cluster.members
    store = EtcdStore(url_starting_with(cluster, alone))
    try:
        healthy, applied = await store._members.health(0)
        assert (healthy, applied > 0) == (None, True)
        for member in others:
            member.pause()

        async def verdict() -> str | None:
            why, _ = await store._members.health(0)
            return why

        why = await eventually(verdict, lambda why: why is not None, timeout_s=15, what="no leader")
        assert why == "it has no leader: it is cut off from a quorum"
        # Nobody healthy to go to: the client stays where it is.
        await store._members.check()
        assert store._members.current == 0
    finally:
        for member in others:
            member.resume()
        await store.close()
