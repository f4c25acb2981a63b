"""TLS on every hop: the servers and clients of gRPC and HTTP, configured by one `TlsSettings`."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import httpx

from tether.config import TlsSettings

GrpcOptions = Sequence[tuple[str, Any]]


def add_grpc_port(server: grpc.aio.Server, address: str, tls: TlsSettings) -> int:
    """Binds `server` to `address` (`host:port`), with TLS when `tls` serves it (and asking
    every client for a certificate under mutual TLS); returns the port bound."""
    if not tls.serving:
        return server.add_insecure_port(address)
    assert tls.cert_file is not None
    assert tls.key_file is not None
    credentials = grpc.ssl_server_credentials(
        [(tls.key_file.read_bytes(), tls.cert_file.read_bytes())],
        root_certificates=tls.ca_file.read_bytes() if tls.mutual and tls.ca_file else None,
        require_client_auth=tls.mutual,
    )
    return server.add_secure_port(address, credentials)


def grpc_channel(
    address: str, tls: TlsSettings, options: GrpcOptions | None = None
) -> grpc.aio.Channel:
    """A channel to another service at `address`: TLS trusting the region's CA (showing this
    process's certificate, if it has one) when `tls` connects so, else plaintext."""
    if not tls.connecting:
        return grpc.aio.insecure_channel(address, options)
    assert tls.ca_file is not None
    credentials = grpc.ssl_channel_credentials(
        root_certificates=tls.ca_file.read_bytes(),
        private_key=_read(tls.key_file),
        certificate_chain=_read(tls.cert_file),
    )
    if tls.server_name:
        options = [*(options or ()), ("grpc.ssl_target_name_override", tls.server_name)]
    return grpc.aio.secure_channel(address, credentials, options)


def http_server_options(tls: TlsSettings, *, verify_clients: bool) -> dict[str, Any]:
    """uvicorn.Config's arguments for serving `tls` (none without it); `verify_clients` asks
    every client for a certificate the region's CA signed."""
    if not tls.serving:
        return {}
    options: dict[str, Any] = {"ssl_certfile": tls.cert_file, "ssl_keyfile": tls.key_file}
    if verify_clients:
        options |= {"ssl_ca_certs": str(tls.ca_file), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return options


def http_scheme(tls: TlsSettings) -> str:
    """`https` when this process's servers serve TLS, else `http`."""
    return "https" if tls.serving else "http"


def client_context(
    ca_file: Path | None, cert_file: Path | None = None, key_file: Path | None = None
) -> ssl.SSLContext | bool:
    """httpx's `verify`: a context trusting `ca_file` (and showing `cert_file` to a server that
    asks), or True (the system's CAs) without one."""
    if ca_file is None:
        return True
    context = ssl.create_default_context(cafile=str(ca_file))
    if cert_file is not None:
        context.load_cert_chain(cert_file, key_file)
    return context


def http_client_options(tls: TlsSettings) -> dict[str, Any]:
    """httpx.AsyncClient's arguments for this process's calls to other services' HTTP
    endpoints: the region's CA, this process's certificate, `server_name` checked in place of
    the address called, and, with a CA, no call over plain HTTP (an agent that registered an
    http:// address is refused, not spoken to in the clear)."""
    options: dict[str, Any] = {"verify": client_context(tls.ca_file, tls.cert_file, tls.key_file)}
    if not tls.connecting:
        return options
    server_name = tls.server_name

    async def secure(request: httpx.Request) -> None:
        if request.url.scheme != "https":
            raise httpx.UnsupportedProtocol(
                f"{request.url.scheme}://{request.url.netloc.decode()}: not HTTPS, and this "
                "process talks to other services over TLS only (TETHER_TLS_CA_FILE)",
                request=request,
            )
        if server_name:
            request.extensions["sni_hostname"] = server_name

    options["event_hooks"] = {"request": [secure]}
    return options


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None
