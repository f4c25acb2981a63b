"""A store that times every request of the backend it wraps, for the store's metrics."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import Final, TypeVar

from tether import metrics
from tether.store.base import Compare, KeyValue, Op, RangeResult, Store, TxnResult, Watch

T = TypeVar("T")

OPERATIONS: Final = (
    "get",
    "range",
    "count",
    "txn",
    "put",
    "delete",
    "create",
    "lease_grant",
    "lease_keepalive",
    "lease_revoke",
    "lease_time_to_live",
    "revision",
    "compact",
)
"""The `operation` label's values: the protocol's requests (watches are streams, not timed)."""


class MeasuredStore(Store):
    """`inner`, with each request's duration and failure counted under `backend`.

    Wrapping at `open_store` times every backend at one point. `put`, `delete` and `create`
    count as themselves, not as the `txn` they are built on.
    """

    def __init__(self, inner: Store, backend: str) -> None:
        self.inner = inner
        self.url = inner.url
        self.backend = backend
        # Bound once: looking a child up by its labels on every request costs a lock and a dict.
        self._durations = {
            op: metrics.STORE_REQUEST_SECONDS.labels(backend, op) for op in OPERATIONS
        }
        self._errors = {op: metrics.STORE_REQUEST_ERRORS.labels(backend, op) for op in OPERATIONS}

    async def _measured(self, operation: str, request: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            return await request
        except Exception:
            self._errors[operation].inc()
            raise
        finally:
            self._durations[operation].observe(time.perf_counter() - started)

    async def get(self, key: str) -> KeyValue | None:
        return await self._measured("get", self.inner.get(key))

    async def range(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int = 0,
        revision: int = 0,
    ) -> RangeResult:
        return await self._measured(
            "range",
            self.inner.range(prefix, start_after=start_after, limit=limit, revision=revision),
        )

    async def count(self, prefix: str) -> int:
        return await self._measured("count", self.inner.count(prefix))

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        return await self._measured("txn", self.inner.txn(compares, success, failure))

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> int:
        return await self._measured("put", self.inner.put(key, value, lease=lease))

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        return await self._measured("delete", self.inner.delete(key, prefix=prefix))

    async def create(self, key: str, value: bytes, *, lease: int = 0) -> bool:
        return await self._measured("create", self.inner.create(key, value, lease=lease))

    async def lease_grant(self, ttl_s: int) -> int:
        return await self._measured("lease_grant", self.inner.lease_grant(ttl_s))

    async def lease_keepalive(self, lease: int) -> int:
        return await self._measured("lease_keepalive", self.inner.lease_keepalive(lease))

    async def lease_revoke(self, lease: int) -> None:
        await self._measured("lease_revoke", self.inner.lease_revoke(lease))

    async def lease_time_to_live(self, lease: int) -> int | None:
        return await self._measured("lease_time_to_live", self.inner.lease_time_to_live(lease))

    def watch(self, prefix: str, *, start_revision: int) -> Watch:
        return self.inner.watch(prefix, start_revision=start_revision)

    async def revision(self) -> int:
        return await self._measured("revision", self.inner.revision())

    async def compact(self, revision: int) -> None:
        await self._measured("compact", self.inner.compact(revision))

    async def close(self) -> None:
        await self.inner.close()
