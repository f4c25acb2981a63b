"""The production store: an etcd v3 cluster, spoken to with aetcd's etcd v3 protocol bindings.

aetcd's high-level client covers one endpoint without TLS and cannot read at a revision or with a
limit, so this backend drives aetcd's generated KV, Lease, Watch and Auth stubs (`aetcd.rpc`)
over its own grpc.aio channel: several endpoints with failover, TLS, and user/password auth.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import grpc
import grpc.aio
from aetcd import rpc

from tether.config import StoreSettings
from tether.store.base import (
    CompactedError,
    Compare,
    KeyValue,
    LeaseNotFound,
    Op,
    Put,
    RangeResult,
    Store,
    StoreError,
    StoreUnavailable,
    TxnResult,
    Watch,
    WatchEvent,
    prefix_end,
    request_timeout_s,
)
from tether.store.etcd_members import Endpoint, Members, Stubs, address
from tether.store.etcd_streams import (
    RETRYABLE,
    KeepAliveStream,
    Subscription,
    WatchStream,
    kv_of,
    revisions_of,
    translate,
)
from tether.store.etcd_txn import (
    Resend,
    applied_before,
    check_request,
    resend_of,
    txn_request,
    txn_result,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

_REPEATABLE: Final = frozenset({"Range", "LeaseGrant", "LeaseRevoke", "LeaseTimeToLive", "Compact"})
"""Calls sent again after UNAVAILABLE, as etcd's own client does: reads, and writes whose repeat
changes nothing (a second lease expires unused). A Txn is not: it may have been applied."""
_RESEND_BACKOFF_S: Final = (0.05, 1.0)
"""First and longest pause before sending a repeatable call again."""
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024


def parse_endpoints(url: str) -> tuple[list[tuple[str, int]], bool]:
    """`etcd://h:p,h:p` (or `etcds://` for TLS) -> ([(host, port), ...], tls)."""
    parts = urlsplit(url)
    if parts.scheme not in ("etcd", "etcds"):
        raise StoreError(f"{url!r} is not an etcd URL (etcd://host:port[,host:port...])")
    endpoints: list[tuple[str, int]] = []
    for item in parts.netloc.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise StoreError(f"etcd endpoint {item!r} in {url!r} must be host:port")
        endpoints.append((host.strip("[]"), int(port)))
    return endpoints, parts.scheme == "etcds"


class EtcdStore(Store):
    """The store on an etcd v3 cluster."""

    def __init__(self, url: str, settings: StoreSettings | None = None) -> None:
        self.url = url
        self._settings = settings or StoreSettings(TETHER_STORE=url)
        endpoints, tls = parse_endpoints(url)
        self._tls = tls or self._settings.ca_file is not None
        self._metadata: tuple[tuple[str, str], ...] = ()
        self._members = Members(endpoints, self._open_channel, self._token, self._member_left)
        self._authenticated_on: int | None = None
        """The member whose auth token `_metadata` holds (tokens may be a member's own)."""
        self._auth_lock: asyncio.Lock | None = None
        self._watch_stream = WatchStream(self._connect, self._token)
        self._keepalives = KeepAliveStream(self._connect, self._token)

    # --- plumbing ----------------------------------------------------------------------------

    def _token(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def _open_channel(self, endpoint: Endpoint) -> grpc.aio.Channel:
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.keepalive_time_ms", 10_000),
            ("grpc.keepalive_timeout_ms", 5_000),
            ("grpc.keepalive_permit_without_calls", 1),
            # Notice a member that is back soon: the health check may want it again.
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 2_000),
        ]
        if self._tls:
            return grpc.aio.secure_channel(address(endpoint), self._credentials(), options)
        return grpc.aio.insecure_channel(address(endpoint), options)

    def _member_left(self) -> None:
        """The client now talks to another member: the streams follow, and the auth token is
        asked for again from the new member."""
        self._watch_stream.reopen()
        self._keepalives.reset(StoreUnavailable("the etcd member in use was left"))
        self._authenticated_on = None

    def _credentials(self) -> grpc.ChannelCredentials:
        def read(path: Any) -> bytes | None:
            return None if path is None else path.read_bytes()

        s = self._settings
        return grpc.ssl_channel_credentials(
            root_certificates=read(s.ca_file),
            private_key=read(s.key_file),
            certificate_chain=read(s.cert_file),
        )

    async def _connect(self) -> Stubs:
        """The member in use's stubs, authenticated on it when the store has a user."""
        stubs = self._members.stubs()
        if self._settings.username and self._authenticated_on != self._members.current:
            if self._auth_lock is None:
                self._auth_lock = asyncio.Lock()
            async with self._auth_lock:
                if self._authenticated_on != self._members.current:
                    await self._authenticate(stubs)
        return stubs

    async def _authenticate(self, stubs: Stubs) -> None:
        s = self._settings
        if s.password is None:
            raise StoreError("TETHER_STORE_USERNAME is set but TETHER_STORE_PASSWORD is not")
        member = self._members.current
        try:
            response = await stubs.auth.Authenticate(
                rpc.AuthenticateRequest(name=s.username, password=s.password.get_secret_value()),
                timeout=request_timeout_s(s.timeout_s),
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError as exc:
            raise translate(exc, "authentication") from exc
        self._metadata = (("token", response.token),)
        self._authenticated_on = member

    async def _unary(
        self,
        service: str,
        method: str,
        request: Any,
        *,
        resend: bool | None = None,
        on_resend: Callable[[], None] | None = None,
    ) -> Any:
        """Calls `method` of etcd's `service` ("kv" or "lease") within the request deadline,
        renewing an expired token once.

        A call that may be sent twice (`resend`; by default the `_REPEATABLE` ones) is sent
        again while etcd answers UNAVAILABLE, or when the client leaves the member it was sent
        to: a member that dies or loses its leader fails the calls in flight ("leader
        changed", "no leader") although the cluster serves again within an election.
        """
        resendable = method in _REPEATABLE if resend is None else resend
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request_timeout_s(self._settings.timeout_s)
        backoff, max_backoff = _RESEND_BACKOFF_S
        renewed = False
        while True:
            stubs = await self._connect()
            call = getattr(getattr(stubs, service), method)(
                request,
                timeout=max(deadline - loop.time(), 0.0),
                metadata=self._metadata,
                wait_for_ready=True,
            )
            try:
                with self._members.tracking(call):
                    return await call
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise
                # Cancelled because the client left the member: where it went, it may go again.
                failure: StoreError = StoreUnavailable(
                    f"etcd {method} at {self.url}: the member it was sent to was left"
                )
            except grpc.aio.AioRpcError as exc:
                token_expired = exc.code() == grpc.StatusCode.UNAUTHENTICATED or (
                    "invalid auth token" in (exc.details() or "")
                )
                if token_expired and not renewed and self._settings.username:
                    renewed = True
                    await self._authenticate(stubs)
                    continue
                failure = translate(exc, f"{method} at {self.url}")
                if exc.code() not in RETRYABLE:
                    raise failure from exc
                self._members.suspect()
            if not resendable or deadline - loop.time() <= backoff:
                raise failure
            log.info("etcd %s failed (%s); sending it again", method, failure)
            if on_resend is not None:
                on_resend()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, max_backoff)

    # --- reads -------------------------------------------------------------------------------

    async def revision(self) -> int:
        response = await self._unary("kv", "Range", rpc.RangeRequest(key=b"\0", count_only=True))
        return int(response.header.revision)

    async def get(self, key: str) -> KeyValue | None:
        response = await self._unary("kv", "Range", rpc.RangeRequest(key=key.encode()))
        return kv_of(response.kvs[0]) if response.kvs else None

    async def range(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        limit: int = 0,
        revision: int = 0,
    ) -> RangeResult:
        if limit < 0 or revision < 0:
            raise StoreError("range limit and revision must not be negative")
        start = prefix.encode() if start_after is None else start_after.encode() + b"\0"
        request = rpc.RangeRequest(
            key=start, range_end=prefix_end(prefix), limit=limit, revision=revision
        )
        try:
            response = await self._unary("kv", "Range", request)
        except CompactedError as exc:
            raise CompactedError(revision, None) from exc
        return RangeResult(
            [kv_of(kv) for kv in response.kvs],
            revision or int(response.header.revision),
            bool(response.more),
        )

    async def count(self, prefix: str) -> int:
        request = rpc.RangeRequest(
            key=prefix.encode(), range_end=prefix_end(prefix), count_only=True
        )
        return int((await self._unary("kv", "Range", request)).count)

    # --- writes ------------------------------------------------------------------------------

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        """Sent again after a lost answer only as `etcd_txn.resend_of` allows."""
        policy = resend_of(compares, success, failure)
        resent = False

        def note_resend() -> None:
            nonlocal resent
            resent = True

        try:
            response = await self._unary(
                "kv",
                "Txn",
                txn_request(compares, success, failure),
                resend=policy is not Resend.NEVER,
                on_resend=note_resend,
            )
        except LeaseNotFound as exc:
            leases = [op.lease for op in (*success, *failure) if isinstance(op, Put) and op.lease]
            raise LeaseNotFound(leases[0] if leases else 0) from exc
        result = txn_result(response)
        if resent and policy is Resend.CAS and not result.succeeded:
            check = txn_result(await self._unary("kv", "Txn", check_request(success), resend=True))
            first = applied_before(compares, success, check)
            if first is not None:
                log.info(
                    "etcd Txn sent again had been applied the first time, at %d", first.revision
                )
                return first
        return result

    # --- leases ------------------------------------------------------------------------------

    async def lease_grant(self, ttl_s: int) -> int:
        if ttl_s < 1:
            raise StoreError(f"lease TTL must be at least 1 s, not {ttl_s}")
        response = await self._unary("lease", "LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl_s))
        if response.error:
            raise StoreError(f"etcd refused a lease: {response.error}")
        return int(response.ID)

    async def lease_keepalive(self, lease: int) -> int:
        return await self._keepalives.renew(lease, request_timeout_s(self._settings.timeout_s))

    async def lease_revoke(self, lease: int) -> None:
        with contextlib.suppress(LeaseNotFound):
            await self._unary("lease", "LeaseRevoke", rpc.LeaseRevokeRequest(ID=lease))

    async def lease_time_to_live(self, lease: int) -> int | None:
        response = await self._unary(
            "lease", "LeaseTimeToLive", rpc.LeaseTimeToLiveRequest(ID=lease)
        )
        # etcd answers TTL -1 for a lease it does not know (expired or revoked).
        return int(response.TTL) if response.TTL >= 0 else None

    # --- history -----------------------------------------------------------------------------

    def watch(self, prefix: str, *, start_revision: int) -> Watch:
        return _EtcdWatch(self, prefix, start_revision)

    async def compact(self, revision: int) -> None:
        # Compacting at or before the current compaction point is a no-op, as in the SQL store.
        with contextlib.suppress(CompactedError):
            await self._unary(
                "kv", "Compact", rpc.CompactionRequest(revision=revision, physical=True)
            )

    # --- lifecycle ---------------------------------------------------------------------------

    async def close(self) -> None:
        await self._watch_stream.close()
        await self._keepalives.close()
        await self._members.close()


class _EtcdWatch(Watch):
    """A watch on the store's shared watch stream (`WatchStream`)."""

    def __init__(self, store: EtcdStore, prefix: str, start_revision: int) -> None:
        super().__init__(prefix, start_revision)
        self._store = store
        self._subscription: Subscription | None = None
        self._closed = False

    async def _revisions(self) -> AsyncIterator[list[WatchEvent]]:
        if self.next_revision <= 0:
            self.next_revision = await self._store.revision() + 1
        if self._closed:
            return
        stream = self._store._watch_stream
        self._subscription = await stream.subscribe(self.prefix, self.next_revision)
        async for events in revisions_of(stream, self._subscription):
            self.next_revision = events[0].revision + 1
            yield events

    @property
    def connected(self) -> bool:
        return self._store._watch_stream.opened

    async def close(self) -> None:
        self._closed = True
        if self._subscription is not None:
            await self._store._watch_stream.unsubscribe(self._subscription)
