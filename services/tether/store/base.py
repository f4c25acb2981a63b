"""The store protocol every backend implements: revisioned keys, transactions, leases, watch."""

from __future__ import annotations

import abc
import contextlib
import enum
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Self


class StoreError(Exception):
    """A store request failed; the message says why."""


class StoreUnavailable(StoreError):
    """The store cannot be reached right now; the request may be retried."""


class StoreMissing(StoreError):
    """There is no store at the URL (a SQLite file that does not exist), and none was to be
    created."""


class CompactedError(StoreError):
    """The requested revision is older than the store's retained history."""

    def __init__(self, requested: int, compacted: int | None) -> None:
        since = f" (history starts at {compacted})" if compacted else ""
        super().__init__(
            f"revision {requested} has been compacted{since}; "
            "re-list the prefix and watch from the revision of that list"
        )
        self.requested = requested
        self.compacted = compacted


class LeaseNotFound(StoreError):
    """The lease does not exist: it expired, was revoked, or never existed."""

    def __init__(self, lease: int) -> None:
        super().__init__(f"lease {lease:x} not found (expired or revoked)")
        self.lease = lease


_wait_limit: ContextVar[float | None] = ContextVar("tether_store_wait_limit", default=None)


@contextlib.contextmanager
def wait_limit(seconds: float) -> Iterator[None]:
    """Inside the block, a request to an unreachable store fails with `StoreUnavailable` after
    at most `seconds`, not after the store's own (longer) deadline.

    For requests someone is waiting on, such as an API call: a quick 503 tells them more than
    a hang. Backends that can wait for their server (etcd) honour it.
    """
    token = _wait_limit.set(seconds)
    try:
        yield
    finally:
        _wait_limit.reset(token)


def request_timeout_s(deadline_s: float) -> float:
    """How long one request may take: the store's `deadline_s`, or less inside `wait_limit`."""
    limit = _wait_limit.get()
    return deadline_s if limit is None else min(deadline_s, limit)


@dataclass(frozen=True, slots=True)
class KeyValue:
    """One key as stored, with the revisions etcd defines for it."""

    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


@dataclass(frozen=True, slots=True)
class RangeResult:
    """Keys read at one store revision."""

    kvs: list[KeyValue]
    revision: int
    more: bool = False


class CompareTarget(enum.Enum):
    VALUE = "value"
    VERSION = "version"
    CREATE_REVISION = "create_revision"
    MOD_REVISION = "mod_revision"


class CompareOp(enum.Enum):
    EQUAL = "=="
    NOT_EQUAL = "!="
    GREATER = ">"
    LESS = "<"


@dataclass(frozen=True, slots=True)
class Compare:
    """A condition on one key. A missing key has version, create and mod revision 0."""

    key: str
    target: CompareTarget
    op: CompareOp
    operand: int | bytes

    def __post_init__(self) -> None:
        wants_bytes = self.target is CompareTarget.VALUE
        if wants_bytes != isinstance(self.operand, bytes):
            kind = "bytes" if wants_bytes else "an int"
            raise TypeError(f"compare on {self.target.value} of {self.key!r} needs {kind}")

    def holds_for(self, kv: KeyValue | None) -> bool:
        """Evaluates the condition the way etcd does (used by backends that evaluate locally)."""
        actual: int | bytes
        if self.target is CompareTarget.VALUE:
            if kv is None:
                # etcd: a value compare against a missing key is always false.
                return False
            actual = kv.value
        elif kv is None:
            actual = 0
        else:
            actual = getattr(kv, self.target.value)
        operand = self.operand
        if self.op is CompareOp.EQUAL:
            return actual == operand
        if self.op is CompareOp.NOT_EQUAL:
            return actual != operand
        if self.op is CompareOp.GREATER:
            return actual > operand  # type: ignore[operator]
        return actual < operand  # type: ignore[operator]


def key_missing(key: str) -> Compare:
    """True when `key` does not exist."""
    return Compare(key, CompareTarget.CREATE_REVISION, CompareOp.EQUAL, 0)


def key_exists(key: str) -> Compare:
    """True when `key` exists."""
    return Compare(key, CompareTarget.CREATE_REVISION, CompareOp.NOT_EQUAL, 0)


def mod_revision_is(key: str, revision: int) -> Compare:
    """True when `key` was last written at `revision` (0: the key is missing)."""
    return Compare(key, CompareTarget.MOD_REVISION, CompareOp.EQUAL, revision)


def value_is(key: str, value: bytes) -> Compare:
    """True when `key` exists and holds exactly `value`."""
    return Compare(key, CompareTarget.VALUE, CompareOp.EQUAL, value)


@dataclass(frozen=True, slots=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    """Deletes `key`, or every key under it when `prefix` is set."""

    key: str
    prefix: bool = False


@dataclass(frozen=True, slots=True)
class Get:
    """Reads `key`, or every key under it when `prefix` is set."""

    key: str
    prefix: bool = False


Op = Put | Delete | Get


@dataclass(frozen=True, slots=True)
class PutResult:
    pass


@dataclass(frozen=True, slots=True)
class DeleteResult:
    deleted: int


OpResult = RangeResult | PutResult | DeleteResult


@dataclass(frozen=True, slots=True)
class TxnResult:
    """Which branch ran, the store revision after it, and one result per operation of it."""

    succeeded: bool
    revision: int
    results: list[OpResult]

    def kvs(self, position: int) -> list[KeyValue]:
        """What the `Get` at `position` of the branch that ran read."""
        result = self.results[position]
        if not isinstance(result, RangeResult):
            raise TypeError(f"operation {position} of the transaction is not a Get: {result}")
        return result.kvs

    def kv(self, position: int) -> KeyValue | None:
        """The key the `Get` of one key at `position` read, or None when it is missing."""
        kvs = self.kvs(position)
        return kvs[0] if kvs else None

    def deleted(self, position: int) -> int:
        """How many keys the `Delete` at `position` removed."""
        result = self.results[position]
        if not isinstance(result, DeleteResult):
            raise TypeError(f"operation {position} of the transaction is not a Delete: {result}")
        return result.deleted


class EventType(enum.Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """A change to one key. For a delete, `kv.value` is empty and `kv.mod_revision` is when."""

    type: EventType
    kv: KeyValue

    @property
    def revision(self) -> int:
        return self.kv.mod_revision


class _Closable(abc.ABC):
    """Something to `close()`, usable as `async with`."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class Watch(_Closable):
    """A stream of changes under a prefix: one list per revision, in order, each exactly once.

    Use as `async with store.watch(prefix, start_revision=r) as watch: async for events in
    watch`, where `events` holds every change of one revision under the prefix. Loops over the
    same watch continue where the previous loop stopped. A watch survives a lost connection by
    resuming at `next_revision`; it raises `CompactedError` when that history is gone, and the
    caller then re-lists.
    """

    def __init__(self, prefix: str, start_revision: int) -> None:
        self.prefix = prefix
        # Every revision before this one has been delivered: the exact point to resume from.
        self.next_revision = start_revision
        self._revisions_iterator: AsyncIterator[list[WatchEvent]] | None = None

    @abc.abstractmethod
    def _revisions(self) -> AsyncIterator[list[WatchEvent]]:
        """The backend's stream of revisions; sets `next_revision` past each one it yields."""

    @property
    def connected(self) -> bool:
        """Whether the watch is connected to the store now. While it is not (it resumes after
        a lost connection), what it delivered may be behind the store by any amount."""
        return True

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> list[WatchEvent]:
        if self._revisions_iterator is None:
            self._revisions_iterator = self._revisions()
        return await anext(self._revisions_iterator)


class Store(_Closable):
    """The one async interface to the region's state. Backends: etcd and SQL (SQLite/PostgreSQL)."""

    url: str

    # --- reads -------------------------------------------------------------------------------

    @abc.abstractmethod
    async def get(self, key: str) -> KeyValue | None:
        """The current value of `key`, or None."""

    @abc.abstractmethod
    async def range(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int = 0,
        revision: int = 0,
    ) -> RangeResult:
        """Keys under `prefix` in key order, at `revision` (0: now), at most `limit` (0: all).

        Page through a large prefix with `start_after=<last key of the previous page>` and the
        `revision` of the first page, so that every page reads the same snapshot.
        """

    @abc.abstractmethod
    async def count(self, prefix: str) -> int:
        """How many keys are under `prefix` now, counted by the store without reading values."""

    # --- writes ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        """Runs `success` if every compare holds, else `failure`, atomically, as one revision."""

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> int:
        """Writes `key` unconditionally; returns the new store revision."""
        return (await self.txn((), (Put(key, value, lease),))).revision

    async def delete(self, key: str, *, prefix: bool = False) -> int:
        """Deletes `key` (or everything under it); returns how many keys were deleted."""
        return (await self.txn((), (Delete(key, prefix),))).deleted(0)

    async def create(self, key: str, value: bytes, *, lease: int = 0) -> bool:
        """Writes `key` only if it does not exist yet; returns whether it did."""
        return (await self.txn((key_missing(key),), (Put(key, value, lease),))).succeeded

    # --- leases ------------------------------------------------------------------------------

    @abc.abstractmethod
    async def lease_grant(self, ttl_s: int) -> int:
        """A new lease that expires `ttl_s` seconds from now unless kept alive; returns its id."""

    @abc.abstractmethod
    async def lease_keepalive(self, lease: int) -> int:
        """Extends the lease by its TTL; returns the TTL. Raises `LeaseNotFound` once expired."""

    @abc.abstractmethod
    async def lease_revoke(self, lease: int) -> None:
        """Ends the lease now and deletes its keys. Revoking a missing lease is not an error."""

    @abc.abstractmethod
    async def lease_time_to_live(self, lease: int) -> int | None:
        """Whole seconds until the lease expires unless renewed; None once it is gone."""

    # --- history -----------------------------------------------------------------------------

    @abc.abstractmethod
    def watch(self, prefix: str, *, start_revision: int) -> Watch:
        """Changes under `prefix` from `start_revision` (inclusive) on."""

    @abc.abstractmethod
    async def revision(self) -> int:
        """The store's current revision."""

    @abc.abstractmethod
    async def compact(self, revision: int) -> None:
        """Forgets history before `revision`; watches and reads before it raise CompactedError."""


def prefix_end(prefix: str) -> bytes:
    """The first byte string after every key that starts with `prefix` (etcd's range_end)."""
    raw = bytearray(prefix.encode())
    for i in reversed(range(len(raw))):
        if raw[i] < 0xFF:
            raw[i] += 1
            return bytes(raw[: i + 1])
    # Every byte is 0xff: the range is unbounded ("\0" means "to the end" in etcd).
    return b"\0"
