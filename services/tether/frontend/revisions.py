"""The store revision each answer reflects, in `X-Tether-Revision`; reads from the watch-fed
cache unless asked otherwise; and conditional GETs (`ETag`, `If-None-Match` answered 304).

A write answers with the revision it committed at. A read answers with the revision it read
at, and, given `min_revision` (a write's revision), reads no older state than that: a client
that sends back what its write returned sees its write (read-your-writes), on any frontend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Query, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.frontend.deps import CacheDep, SettingsDep
from tether.frontend.problems import FieldError, InvalidInput
from tether.frontend.settings import FrontendSettings
from tether.store import Store
from tether.store.base import Compare, Op, Put, RangeResult, TxnResult
from tether.store.base import Store as BaseStore
from tether.store.cache import CachedReads, StoreCache, Writes
from tether.store.wrapped import WrappedStore

T = TypeVar("T")

REVISION_HEADER = "X-Tether-Revision"


@dataclass
class _Answer:
    revision: int = 0
    """The newest store revision the answer reflects, read or written; 0: none."""


_answer: ContextVar[_Answer | None] = ContextVar("tether_answer", default=None)


def note_revision(revision: int) -> None:
    """The answer being made reflects the store at `revision` (or later)."""
    answer = _answer.get()
    if answer is not None:
        answer.revision = max(answer.revision, revision)


class RevisionNoting(WrappedStore):
    """The frontend's store: notes the revision of every write and read for the answer, and
    keeps the newest revision this frontend wrote at under each prefix (`writes`)."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.writes = Writes()

    async def _around(self, operation: str, call: Callable[[], Awaitable[T]]) -> T:
        result = await call()
        if isinstance(result, RangeResult):
            note_revision(result.revision)
        return result

    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        result = await super().txn(compares, success, failure)
        self._wrote(success if result.succeeded else failure, result.revision)
        return result

    async def put(self, key: str, value: bytes, *, lease: int = 0) -> int:
        revision = await super().put(key, value, lease=lease)
        self._wrote([Put(key, value, lease)], revision)
        return revision

    def _wrote(self, ops: Sequence[Op], revision: int) -> None:
        self.writes.note(ops, revision)
        note_revision(revision)

    # Through `txn`, which returns the revision (a delete or a create alone does not).
    async def delete(self, key: str, *, prefix: bool = False) -> int:
        return await BaseStore.delete(self, key, prefix=prefix)

    async def create(self, key: str, value: bytes, *, lease: int = 0) -> bool:
        return await BaseStore.create(self, key, value, lease=lease)


async def _reads(
    request: Request,
    cache: CacheDep,
    settings: SettingsDep,
    consistent: Annotated[
        bool,
        Query(description="Read the store itself instead of this frontend's watch-fed cache."),
    ] = False,
    min_revision: Annotated[
        int | None,
        Query(
            ge=1,
            description="Answer from state at least this new: the X-Tether-Revision of an "
            "earlier answer (a write's, to read it back). 422 if it is newer than the store.",
        ),
    ] = None,
) -> Store:
    store: RevisionNoting = request.app.state.store
    return await reads_for(store, cache, settings, consistent=consistent, min_revision=min_revision)


async def reads_for(
    store: RevisionNoting,
    cache: StoreCache,
    settings: FrontendSettings,
    *,
    consistent: bool = False,
    min_revision: int | None = None,
) -> CachedReads:
    """What a GET reads through (`ReadsDep`); InvalidInput when `min_revision` is newer than
    the store."""
    if min_revision is not None and min_revision > max(cache.revision, store.writes.newest):
        current = await store.revision()
        if min_revision > current:
            why = f"is newer than the store's revision ({current})"
            raise InvalidInput(
                f"invalid request: min_revision: {why}",
                errors=[FieldError(loc=["min_revision"], msg=why)],
            )
    return CachedReads(
        store,
        None if consistent else cache,
        note_revision,
        min_revision=min_revision or 0,
        # What this frontend wrote, any client reads back through it.
        writes=store.writes,
        wait_s=settings.read_wait_s,
    )


ReadsDep = Annotated[Store, Depends(_reads)]
"""The store to answer a GET from: the frontend's cache where it holds the keys read (the store
itself with `consistent=true`, or where the copy read is not current, is behind
`min_revision`, or lags this frontend's own last write under it for more than
`read_wait_s`)."""


def entity_tag(body: bytes) -> str:
    """The ETag of an answer: names its content, so equal answers have equal tags."""
    return f'"{hashlib.blake2b(body, digest_size=12).hexdigest()}"'


def _matches(if_none_match: str, tag: str) -> bool:
    wanted = {candidate.strip().removeprefix("W/") for candidate in if_none_match.split(",")}
    return "*" in wanted or tag in wanted


class RevisionHeaders:
    """ASGI middleware: `X-Tether-Revision` on every answer that read or wrote the store; on a
    successful JSON answer to a GET, its `ETag`, and 304 without a body when the request's
    `If-None-Match` names it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        answer = _Answer()
        token = _answer.set(answer)
        try:
            if scope["method"] == "GET":
                await self._conditional(scope, receive, send, answer)
            else:
                await self.app(scope, receive, _with_revision(send, answer))
        finally:
            _answer.reset(token)

    async def _conditional(
        self, scope: Scope, receive: Receive, send: Send, answer: _Answer
    ) -> None:
        started: Message | None = None
        chunks: list[bytes] = []

        async def buffered(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                if message["status"] != 200 or not _is_json(message):
                    await _with_revision(send, answer)(message)
                    return
                started = message
                return
            if started is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            await _finish(send, scope, started, b"".join(chunks), answer)

        await self.app(scope, receive, buffered)


async def _finish(send: Send, scope: Scope, started: Message, body: bytes, answer: _Answer) -> None:
    tag = entity_tag(body)
    headers = [(k, v) for k, v in started["headers"] if k.lower() != b"content-length"]
    headers.append((b"etag", tag.encode()))
    if answer.revision:
        headers.append((REVISION_HEADER.lower().encode(), str(answer.revision).encode()))
    request_headers = dict(scope["headers"])
    if_none_match = request_headers.get(b"if-none-match")
    if if_none_match is not None and _matches(if_none_match.decode("latin-1"), tag):
        await send({"type": "http.response.start", "status": 304, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    headers.append((b"content-length", str(len(body)).encode()))
    await send({**started, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _is_json(message: Message) -> bool:
    return any(
        key.lower() == b"content-type" and value.startswith(b"application/json")
        for key, value in message["headers"]
    )


def _with_revision(send: Send, answer: _Answer) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start" and answer.revision:
            headers = [*message["headers"], (b"x-tether-revision", str(answer.revision).encode())]
            message = {**message, "headers": headers}
        await send(message)

    return sending
