"""A store that sends every request on to another store, through one hook subclasses override."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeVar

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
"""The protocol's requests, each passed to `_around` under its name (watches are streams, not
requests: they go to `inner` as they are)."""


class WrappedStore(Store):
    """`inner`, with every request passed through `_around(operation, call)`.

    `put`, `delete` and `create` go to `inner`'s own, not to the `txn` the protocol builds them
    on, so a wrapper sees each request once, under its own name. Closing closes `inner`.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url

    async def _around(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        """Makes `call`, the request `operation` to `inner`; subclasses add to it (a call not
        made, such as one cancelled while it waits its turn, leaves nothing behind)."""
        return await call()

    async def get(self, key: str) -> KeyValue | None:
        return await self._around("get", lambda: self.inner.get(key))

    async def range(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int = 0,
        revision: int = 0,
    ) -> RangeResult:
        return await self._around(
            "range",
            lambda: self.inner.range(
                prefix, start_after=start_after, limit=limit, revision=revision
            ),
        )

    async def count(self, prefix: str) -> int:
        return await self._around("count", lambda: self.inner.count(prefix))

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        return await self._around("txn", lambda: self.inner.txn(compares, success, failure))

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> int:
        return await self._around("put", lambda: self.inner.put(key, value, lease=lease))

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        return await self._around("delete", lambda: self.inner.delete(key, prefix=prefix))

    async def create(self, key: str, value: bytes, *, lease: int = 0) -> bool:
        return await self._around("create", lambda: self.inner.create(key, value, lease=lease))

    async def lease_grant(self, ttl_s: int) -> int:
        return await self._around("lease_grant", lambda: self.inner.lease_grant(ttl_s))

    async def lease_keepalive(self, lease: int) -> int:
        return await self._around("lease_keepalive", lambda: self.inner.lease_keepalive(lease))

    async def lease_revoke(self, lease: int) -> None:
        await self._around("lease_revoke", lambda: self.inner.lease_revoke(lease))

    async def lease_time_to_live(self, lease: int) -> int | None:
        return await self._around(
            "lease_time_to_live", lambda: self.inner.lease_time_to_live(lease)
        )

    def watch(self, prefix: str, *, start_revision: int) -> Watch:
        return self.inner.watch(prefix, start_revision=start_revision)

    async def revision(self) -> int:
        return await self._around("revision", lambda: self.inner.revision())

    async def compact(self, revision: int) -> None:
        await self._around("compact", lambda: self.inner.compact(revision))

    async def close(self) -> None:
        await self.inner.close()
