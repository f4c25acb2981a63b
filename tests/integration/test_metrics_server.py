"""A service wrapped with its process's metrics: served while it runs, and a port in use fails
before the service starts."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.support.metrics import scrape
from tether.metrics_server import MetricsPortUnavailable, WithMetrics
from tether.store import open_store
from tether.taskcontrol.registry.service import Registry
from tether.taskcontrol.registry.settings import RegistrySettings


def registry(tmp_path: Path) -> Registry:
    return Registry(open_store(f"sqlite:///{tmp_path / 'region.db'}"), RegistrySettings())


async def test_metrics_are_served_while_the_service_runs(tmp_path: Path) -> None:
    service = registry(tmp_path)
    wrapped = WithMetrics(service, 0)
    assert wrapped.name == "registry"
    await wrapped.start()
    try:
        assert service.address
        scraped = await scrape(wrapped.metrics.url)
        assert scraped.value("process_resident_memory_bytes") > 0
    finally:
        await wrapped.stop()
    with pytest.raises(httpx.ConnectError):
        await scrape(wrapped.metrics.url)


async def test_a_metrics_port_in_use_fails_before_the_service_starts(tmp_path: Path) -> None:
    service = registry(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsPortUnavailable, match=f"on 127.0.0.1:{port}: .*in use"):
            await WithMetrics(service, port).start()
    assert service.address == "", "the registry never started"
    await service.stop()
