"""The HTTP server every service runs: each connection it accepts has Nagle's algorithm off,
and it stops at once though its main loop ticks only once a second."""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tether.service import HttpServer


def app() -> Starlette:
    return Starlette(routes=[Route("/", lambda _: PlainTextResponse("ok"))])


async def test_accepted_connections_send_without_waiting_for_acks() -> None:
    # With Nagle on, a response written as headers then body waited for the client's delayed
    # ACK: 40 ms a request on loopback. asyncio turns it off only on sockets made as TCP.
    server = HttpServer(app(), "127.0.0.1", 0, name="nagle-test", lifespan="off")
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            assert (await client.get("/")).text == "ok"
            assert server._server is not None
            connections = server._server.server_state.connections
            assert connections
            for connection in connections:
                accepted = connection.transport.get_extra_info("socket")
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        await server.stop()


async def test_stop_ends_the_server_without_waiting_for_its_next_tick() -> None:
    server = HttpServer(app(), "127.0.0.1", 0, name="tick-test", lifespan="off")
    await server.start()
    assert server._server is not None
    ticked = asyncio.Event()
    on_tick = server._server.on_tick

    async def noting(counter: int) -> bool:
        ticked.set()
        return await on_tick(counter)

    server._server.on_tick = noting  # type: ignore[method-assign]
    # Just after a tick, the next is a second away: a stop that waited for it would take that.
    await asyncio.wait_for(ticked.wait(), timeout=10)
    started = time.monotonic()
    await server.stop()
    assert time.monotonic() - started < 0.5
