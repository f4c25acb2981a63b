"""The store `open_store` returns times each request under its own operation, and counts
failures."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from tether.store import LeaseNotFound, Put, open_store


def requests(operation: str) -> float:
    labels = {"backend": "sqlite", "operation": operation}
    return REGISTRY.get_sample_value("tether_store_request_duration_seconds_count", labels) or 0.0


def errors(operation: str) -> float:
    labels = {"backend": "sqlite", "operation": operation}
    return REGISTRY.get_sample_value("tether_store_request_errors_total", labels) or 0.0


async def test_each_request_counts_once_under_its_operation(tmp_path: Path) -> None:
    operations = ("get", "range", "txn", "put", "delete", "create", "count")
    before = {operation: requests(operation) for operation in operations}
    async with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        await store.put("/a", b"1")
        assert await store.create("/b", b"2")
        await store.txn([], [Put("/c", b"3")])
        assert (await store.get("/a")) is not None
        assert len((await store.range("/")).kvs) == 3
        assert await store.count("/") == 3
        assert await store.delete("/", prefix=True) == 3
    # put, create and delete are txns underneath, but count only as themselves.
    assert {operation: requests(operation) - before[operation] for operation in operations} == (
        dict.fromkeys(operations, 1.0)
    )


async def test_a_failed_request_is_timed_and_counted_as_an_error(tmp_path: Path) -> None:
    before = requests("lease_keepalive"), errors("lease_keepalive")
    async with open_store(f"sqlite:///{tmp_path / 'r.db'}") as store:
        with pytest.raises(LeaseNotFound):
            await store.lease_keepalive(12345)
    assert (requests("lease_keepalive"), errors("lease_keepalive")) == (
        before[0] + 1,
        before[1] + 1,
    )
