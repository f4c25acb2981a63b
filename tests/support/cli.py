"""A service command's `serve` call captured instead of run, for the commands' unit tests."""

from __future__ import annotations

from typing import NamedTuple, cast

import pytest

from tether.cli import serving
from tether.service import InRegion, Service
from tether.store import Store


class Served(NamedTuple):
    """What a command would have run: its service (on a stand-in store), URL and log level."""

    service: Service
    url: str | None
    log_level: str


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[Served]:
    """Every service a command would have run, in order; empty when it ran none."""
    captured: list[Served] = []
    urls: list[str | None] = []

    def connect_store(url: str | None, *, create: bool = True) -> Store:
        # Services look for their region: they never create a store.
        assert not create
        urls.append(url)
        return cast(Store, object())  # never used: the service is not started

    def run(service: Service, log_level: str) -> None:
        # Every command's service refuses a store that holds no region.
        assert isinstance(service, InRegion), service
        captured.append(Served(service.service, urls[-1], log_level))

    # `serve` itself stays: its store and run calls are what each command reaches.
    monkeypatch.setattr(serving, "connect_store", connect_store)
    monkeypatch.setattr(serving, "run", run)
    return captured
