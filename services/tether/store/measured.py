"""A store that times every request of the backend it wraps, for the store's metrics."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tether import metrics
from tether.store.base import Store
from tether.store.wrapped import OPERATIONS, WrappedStore

T = TypeVar("T")


class MeasuredStore(WrappedStore):
    """`inner`, with each request's duration and failure counted under `backend`.

    Wrapping at `open_store` times every backend at one point. `put`, `delete` and `create`
    count as themselves, not as the `txn` they are built on.
    """

    def __init__(self, inner: Store, backend: str) -> None:
        super().__init__(inner)
        self.backend = backend
        # Bound once: looking a child up by its labels on every request costs a lock and a dict.
        self._durations = {
            op: metrics.STORE_REQUEST_SECONDS.labels(backend, op) for op in OPERATIONS
        }
        self._errors = {op: metrics.STORE_REQUEST_ERRORS.labels(backend, op) for op in OPERATIONS}

    async def _around(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        started = time.perf_counter()
        try:
            return await call()
        except Exception:
            self._errors[operation].inc()
            raise
        finally:
            self._durations[operation].observe(time.perf_counter() - started)
