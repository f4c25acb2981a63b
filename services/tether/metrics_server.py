"""Serving a process's metrics over HTTP, next to the service it runs."""

from __future__ import annotations

from typing import cast

from prometheus_client import REGISTRY, make_asgi_app
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.types import ASGIApp

from tether.config import TlsSettings
from tether.service import HttpServer, Service


class MetricsSettings(BaseSettings):
    """Where metrics ports listen, read from TETHER_METRICS_* environment variables."""

    model_config = SettingsConfigDict(env_prefix="TETHER_METRICS_", extra="ignore")

    host: str = Field(default="127.0.0.1", description="Address every metrics port binds to.")


class MetricsPortUnavailable(Exception):
    """The metrics port cannot be bound; the message names it and says why."""


class MetricsServer(Service):
    """Serves the process's metrics at `/metrics` (any path, in fact) on `host:port`."""

    name = "metrics"

    def __init__(self, port: int, host: str | None = None, tls: TlsSettings | None = None) -> None:
        self._http = HttpServer(
            cast(ASGIApp, make_asgi_app(REGISTRY)),
            host or MetricsSettings().host,
            port,
            name="metrics",
            lifespan="off",
            access_log=False,
            # Over TLS when the process serves TLS; Prometheus needs no certificate of its own.
            tls=tls,
        )

    @property
    def url(self) -> str:
        """`http(s)://host:port/metrics`, with the actual port once started."""
        return f"{self._http.url}/metrics"

    async def start(self) -> None:
        try:
            await self._http.start()
        except OSError as error:
            where = f"{self._http.host}:{self._http.port}"
            raise MetricsPortUnavailable(f"cannot serve metrics on {where}: {error}") from error

    async def stop(self) -> None:
        await self._http.stop()


class WithMetrics(Service):
    """`service`, with its process's metrics served on `port` while it runs (0: a free port,
    which `metrics.url` names once started)."""

    def __init__(
        self,
        service: Service,
        port: int,
        host: str | None = None,
        tls: TlsSettings | None = None,
    ) -> None:
        self.name = service.name
        self.service = service
        self.metrics = MetricsServer(port, host, tls)

    async def start(self) -> None:
        # First: a port in use fails the process before the service registers anywhere.
        await self.metrics.start()
        try:
            await self.service.start()
        except BaseException:
            await self.metrics.stop()
            raise

    async def stop(self) -> None:
        try:
            await self.service.stop()
        finally:
            await self.metrics.stop()
