"""The HTTP server every service runs: each connection it accepts has Nagle's algorithm off."""

from __future__ import annotations

import socket

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
