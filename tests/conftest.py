"""Fixtures shared by every test (store backends on a real etcd server, a real SQLite file and,
for the store's conformance suite, a real PostgreSQL server), and how `scripts/test` spreads the
suite over two workers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling
from xdist.scheduler.protocol import Scheduling

from tests.support.harness import LocalRegion
from tests.support.postgres import PostgresServer
from tether.store import Store, open_store
from tether.store.etcd_server import EtcdServer

STORE_BACKENDS = ("sql", "etcd")
"""What every test of a store runs on: a SQLite file and a real etcd server."""
EVERY_BACKEND = (*STORE_BACKENDS, "postgresql")
"""What the store conformance suite runs on besides: the SQL store on a real PostgreSQL server."""


class _EndToEndTogether(LoadFileScheduling):  # type: ignore[misc]  # xdist has no types
    """xdist's `--dist loadfile`, with every end-to-end module counted as one file: they run one
    after another on one worker, so that two regions never start at once on two cores (a
    region's start is CPU-bound: run beside the others, the region scripts' smoke runs took half
    as long again and the suite longer, not shorter), while the other worker takes the unit and
    integration modules, each whole."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return "tests/e2e" if path.startswith("tests/e2e/") else path


@pytest.hookimpl(tryfirst=True)  # before xdist's own scheduler for --dist loadfile
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    if config.getvalue("dist") != "loadfile":
        return None
    return _EndToEndTogether(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that ran a region reports what its services logged of note: a failure
    seen only in CI, on a slower machine, can then be read from CI's output."""
    report = yield
    if report.failed and call.when != "teardown":
        funcargs = getattr(item, "funcargs", {})
        for name, value in funcargs.items():
            if isinstance(value, LocalRegion):
                report.sections.append((f"region logs ({name})", value.log_digest()))
    return report


@pytest.fixture
def etcd_server() -> Iterator[EtcdServer]:
    """A fresh single-member etcd server, stopped and removed after the test."""
    with EtcdServer(on_tmpfs=True) as server:
        yield server


@contextmanager
def empty_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty store of `backend`: a SQLite file, a fresh etcd server, or a fresh
    database on the session's PostgreSQL server."""
    if backend == "sql":
        yield f"sqlite:///{tmp_path / 'region.db'}"
    elif backend == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        yield server.database()
    else:
        # Data on tmpfs: the tests exercise Tether, not the disk's fsync.
        with EtcdServer(on_tmpfs=True) as etcd:
            yield etcd.url


@pytest.fixture(params=STORE_BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty store of each backend: a SQLite file, or a fresh etcd server."""
    with empty_store(request.param, request, tmp_path) as url:
        yield url


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the session (of each xdist worker); a database per test."""
    server = PostgresServer()
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    async with open_store(store_url) as opened:
        yield opened
