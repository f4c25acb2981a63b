"""The etcd backend rides out a real server restart: watches resume, requests wait and succeed."""

from __future__ import annotations

import asyncio

from tether.store import WatchEvent, open_store
from tether.store.etcd_server import EtcdServer


async def test_watch_resumes_across_an_etcd_restart_exactly_once(etcd_server: EtcdServer) -> None:
    async with open_store(etcd_server.url) as store:
        start = await store.revision() + 1
        expected = [await store.put(f"/r/{i}", b"before") for i in range(20)]
        seen: list[WatchEvent] = []
        async with store.watch("/r/", start_revision=start) as watch:

            async def consume(count: int) -> None:
                async for revision in watch:
                    seen.extend(revision)
                    if len(seen) >= count:
                        return

            await asyncio.wait_for(consume(20), 10)
            # The server goes away and comes back on the same port with the same data.
            await asyncio.to_thread(etcd_server.restart)
            expected += [await store.put(f"/r/{i}", b"after") for i in range(20)]
            await asyncio.wait_for(consume(40), 30)
        assert [event.revision for event in seen] == expected
        assert [event.kv.value for event in seen] == [b"before"] * 20 + [b"after"] * 20


async def test_requests_wait_for_a_restarting_server(etcd_server: EtcdServer) -> None:
    async with open_store(etcd_server.url) as store:
        await store.put("/x", b"1")
        etcd_server.kill()
        restart = asyncio.create_task(asyncio.to_thread(etcd_server.start))
        # Issued while the server is down: gRPC waits for it (within the request deadline).
        assert await store.put("/x", b"2") > 0
        await restart
        kv = await store.get("/x")
        assert kv is not None
        assert kv.value == b"2"
