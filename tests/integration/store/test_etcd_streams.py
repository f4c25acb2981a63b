"""The etcd client's shared streams, seen from the server's own metrics: every watch of a store
client on one Watch stream, every lease renewal on one LeaseKeepAlive stream; and each watch's
revisions exactly once across a broken stream."""

from __future__ import annotations

import asyncio
import re
import urllib.request

from tests.support.waiting import eventually
from tether.store import KeyValue, Store, open_store
from tether.store.etcd import EtcdStore
from tether.store.etcd_server import EtcdServer

WATCHES = 50


def server_metric(server: EtcdServer, name: str, labels: str = "") -> float:
    """A metric of the etcd server, summed over the series whose labels contain `labels`."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.client_port}/metrics").read()
    pattern = re.compile(rf"^{re.escape(name)}(?:{{([^}}]*)}})? (\S+)$", re.MULTILINE)
    return sum(float(value) for found, value in pattern.findall(text.decode()) if labels in found)


async def first_events(store: Store, prefixes: list[str], start: int) -> list[list[KeyValue]]:
    """What each prefix's watch delivers first."""

    async def first(prefix: str) -> list[KeyValue]:
        async with store.watch(prefix, start_revision=start) as watch:
            return [event.kv for event in await anext(aiter(watch))]

    return await asyncio.wait_for(asyncio.gather(*(first(p) for p in prefixes)), 30)


async def test_every_watch_of_a_client_shares_one_stream(etcd_server: EtcdServer) -> None:
    async with open_store(etcd_server.url) as store:
        start = await store.revision() + 1
        prefixes = [f"/w/{i}/" for i in range(WATCHES)]
        delivered = asyncio.create_task(first_events(store, prefixes, start))

        async def watchers() -> float:
            return server_metric(etcd_server, "etcd_debugging_mvcc_watcher_total")

        await eventually(watchers, lambda n: n == WATCHES, timeout_s=30, what="every watch")
        assert server_metric(etcd_server, "etcd_debugging_mvcc_watch_stream_total") == 1
        for prefix in prefixes:
            await store.put(prefix + "k", prefix.encode())
        seen = await delivered
        assert [[kv.value for kv in kvs] for kvs in seen] == [[p.encode()] for p in prefixes]


async def test_a_broken_watch_stream_resumes_every_watch_exactly_once(
    etcd_server: EtcdServer,
) -> None:
    store = EtcdStore(etcd_server.url)
    try:
        start = await store.revision() + 1
        async with (
            store.watch("/a/", start_revision=start) as a,
            store.watch("/b/", start_revision=start) as b,
        ):
            await store.put("/a/1", b"1")
            assert [e.kv.key for e in await anext(aiter(a))] == ["/a/1"]
            store._watch_stream.reopen()
            await store.put("/a/2", b"2")
            await store.put("/b/1", b"1")
            assert [e.kv.key for e in await asyncio.wait_for(anext(aiter(a)), 10)] == ["/a/2"]
            assert [e.kv.key for e in await asyncio.wait_for(anext(aiter(b)), 10)] == ["/b/1"]
            await store.put("/a/3", b"3")
            assert [e.kv.key for e in await asyncio.wait_for(anext(aiter(a)), 10)] == ["/a/3"]
    finally:
        await store.close()


async def test_every_renewal_shares_one_keepalive_stream(etcd_server: EtcdServer) -> None:
    async with open_store(etcd_server.url) as store:
        leases = [await store.lease_grant(30) for _ in range(20)]
        for _ in range(3):
            ttls = await asyncio.gather(*(store.lease_keepalive(lease) for lease in leases))
            assert set(ttls) == {30}
        method = 'grpc_method="LeaseKeepAlive"'
        assert server_metric(etcd_server, "grpc_server_msg_received_total", method) == 60
        assert server_metric(etcd_server, "grpc_server_started_total", method) == 1
