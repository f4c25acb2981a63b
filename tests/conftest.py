"""Fixtures shared by every test: store backends on a real etcd server and a real SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tether.store import Store, open_store
from tether.store.etcd_server import EtcdServer

STORE_BACKENDS = ("sql", "etcd")


@pytest.fixture
def etcd_server() -> Iterator[EtcdServer]:
    """A fresh single-member etcd server, stopped and removed after the test."""
    with EtcdServer(on_tmpfs=True) as server:
        yield server


@pytest.fixture(params=STORE_BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty store of each backend: a SQLite file, or a fresh etcd server."""
    if request.param == "sql":
        yield f"sqlite:///{tmp_path / 'region.db'}"
        return
    # Data on tmpfs: the tests exercise Tether, not the disk's fsync.
    with EtcdServer(on_tmpfs=True) as server:
        yield server.url


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    async with open_store(store_url) as opened:
        yield opened
