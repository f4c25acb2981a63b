"""The HTTP server every service runs: each connection it accepts has Nagle's algorithm off,
and it stops at once though its main loop ticks only once a second."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from tests.support.tls import tls_settings
from tether.config import TlsSettings
from tether.region.certs import SERVICES_NAME, CertFiles, ca_files, init_certs
from tether.service import HttpServer
from tether.tls import client_context, http_client_options


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


async def test_over_tls_it_serves_https_and_under_mutual_tls_only_clients_of_the_region(
    tmp_path: Path,
) -> None:
    init_certs(tmp_path)
    ca = ca_files(tmp_path).cert_file
    tls = tls_settings(tmp_path, "agent", mutual=True)
    server = HttpServer(
        app(), "127.0.0.1", 0, name="tls-test", lifespan="off", tls=tls, verify_clients=True
    )
    await server.start()
    try:
        assert server.url.startswith("https://127.0.0.1:")
        frontend = CertFiles.named(tmp_path, "frontend")
        trusted = client_context(ca, frontend.cert_file, frontend.key_file)
        async with httpx.AsyncClient(verify=trusted, timeout=10) as client:
            assert (await client.get(server.url)).text == "ok"
        async with httpx.AsyncClient(verify=client_context(ca), timeout=10) as client:
            with pytest.raises(httpx.TransportError):
                await client.get(server.url)  # no certificate to show
        async with httpx.AsyncClient(timeout=10) as client:
            with pytest.raises(httpx.TransportError):
                await client.get(server.url.replace("https://", "http://"))
    finally:
        await server.stop()


async def test_a_server_name_is_checked_in_place_of_an_address_no_certificate_lists(
    tmp_path: Path,
) -> None:
    # 127.0.0.2 is in no certificate (as a pod's IP would not be): a client that checks the
    # address refuses the server, one told TETHER_TLS_SERVER_NAME accepts it, by that name.
    init_certs(tmp_path)
    serving = tls_settings(tmp_path, "agent")
    server = HttpServer(app(), "127.0.0.2", 0, name="sni-test", lifespan="off", tls=serving)
    await server.start()
    try:
        by_address = tls_settings(tmp_path)
        async with httpx.AsyncClient(timeout=10, **http_client_options(by_address)) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(server.url)
        by_name = tls_settings(tmp_path, server_name=SERVICES_NAME)
        async with httpx.AsyncClient(timeout=10, **http_client_options(by_name)) as client:
            assert (await client.get(server.url)).text == "ok"
        wrong_name = tls_settings(tmp_path, server_name="elsewhere.example")
        async with httpx.AsyncClient(timeout=10, **http_client_options(wrong_name)) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(server.url)
    finally:
        await server.stop()


async def test_with_the_region_ca_a_client_calls_no_service_over_plain_http(
    tmp_path: Path,
) -> None:
    # An agent that registered an http:// address in a TLS region is refused, not spoken to in
    # the clear.
    init_certs(tmp_path)
    server = HttpServer(app(), "127.0.0.1", 0, name="plain-test", lifespan="off")
    await server.start()
    try:
        tls = tls_settings(tmp_path)
        async with httpx.AsyncClient(timeout=10, **http_client_options(tls)) as client:
            with pytest.raises(httpx.UnsupportedProtocol, match="not HTTPS"):
                await client.get(server.url)
        async with httpx.AsyncClient(timeout=10, **http_client_options(TlsSettings())) as client:
            assert (await client.get(server.url)).text == "ok"
    finally:
        await server.stop()
