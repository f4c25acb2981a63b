"""The production store: an etcd v3 cluster, spoken to with aetcd's etcd v3 protocol bindings.

aetcd's high-level client covers one endpoint without TLS and cannot read at a revision or with a
limit, so this backend drives aetcd's generated KV, Lease, Watch and Auth stubs (`aetcd.rpc`)
over its own grpc.aio channel: several endpoints with failover, TLS, and user/password auth.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import grpc
import grpc.aio
from aetcd import rpc

from tether.config import StoreSettings
from tether.store.base import (
    CompactedError,
    Compare,
    CompareOp,
    CompareTarget,
    Delete,
    DeleteResult,
    EventType,
    Get,
    KeyValue,
    LeaseNotFound,
    Op,
    OpResult,
    Put,
    PutResult,
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

log = logging.getLogger(__name__)

T = TypeVar("T")

_COMPARE_RESULT = {
    CompareOp.EQUAL: rpc.Compare.EQUAL,
    CompareOp.NOT_EQUAL: rpc.Compare.NOT_EQUAL,
    CompareOp.GREATER: rpc.Compare.GREATER,
    CompareOp.LESS: rpc.Compare.LESS,
}
_COMPARE_TARGET = {
    CompareTarget.VALUE: (rpc.Compare.VALUE, "value"),
    CompareTarget.VERSION: (rpc.Compare.VERSION, "version"),
    CompareTarget.CREATE_REVISION: (rpc.Compare.CREATE, "create_revision"),
    CompareTarget.MOD_REVISION: (rpc.Compare.MOD, "mod_revision"),
}
_EVENT_TYPE = {rpc.Event.PUT: EventType.PUT, rpc.Event.DELETE: EventType.DELETE}
_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
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


def _grpc_target(endpoints: list[tuple[str, int]]) -> str:
    """A gRPC target over every endpoint; gRPC's pick_first fails over between them."""
    if len(endpoints) == 1:
        host, port = endpoints[0]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    addresses: list[str] = []
    families: set[int] = set()
    for host, port in endpoints:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ip = ipaddress.ip_address(
                socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0]
            )
        families.add(ip.version)
        addresses.append(f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}")
    if len(families) > 1:
        raise StoreError("etcd endpoints must be all IPv4 or all IPv6")
    return ("ipv6:" if 6 in families else "ipv4:") + ",".join(addresses)


def _translate(exc: grpc.aio.AioRpcError, what: str) -> StoreError:
    code, details = exc.code(), exc.details() or ""
    if code in _RETRYABLE:
        return StoreUnavailable(f"etcd unavailable during {what}: {details or code.name}")
    if "required revision has been compacted" in details:
        return CompactedError(0, None)
    if "lease not found" in details:
        return LeaseNotFound(0)
    return StoreError(f"etcd refused {what}: {details or code.name}")


@dataclass(frozen=True, slots=True)
class _Stubs:
    """etcd's services on one channel, made once: building stubs per request costs CPU."""

    kv: Any
    lease: Any
    watch: Any
    auth: Any

    @classmethod
    def on(cls, channel: grpc.aio.Channel) -> _Stubs:
        return cls(
            rpc.KVStub(channel),
            rpc.LeaseStub(channel),
            rpc.WatchStub(channel),
            rpc.AuthStub(channel),
        )


class EtcdStore(Store):
    """The store on an etcd v3 cluster."""

    def __init__(self, url: str, settings: StoreSettings | None = None) -> None:
        self.url = url
        self._settings = settings or StoreSettings(TETHER_STORE=url)
        self._endpoints, self._tls = parse_endpoints(url)
        self._tls = self._tls or self._settings.ca_file is not None
        self._channel: grpc.aio.Channel | None = None
        self._stubs: _Stubs | None = None
        self._metadata: tuple[tuple[str, str], ...] = ()
        self._connect_lock: asyncio.Lock | None = None
        self._watches: set[_EtcdWatch] = set()

    # --- plumbing ----------------------------------------------------------------------------

    def _credentials(self) -> grpc.ChannelCredentials:
        def read(path: Any) -> bytes | None:
            return None if path is None else path.read_bytes()

        s = self._settings
        return grpc.ssl_channel_credentials(
            root_certificates=read(s.ca_file),
            private_key=read(s.key_file),
            certificate_chain=read(s.cert_file),
        )

    async def _connect(self) -> _Stubs:
        if self._stubs is not None:
            return self._stubs
        if self._connect_lock is None:
            self._connect_lock = asyncio.Lock()
        async with self._connect_lock:
            if self._stubs is None:
                target = await asyncio.to_thread(_grpc_target, self._endpoints)
                options: list[tuple[str, Any]] = [
                    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                    ("grpc.keepalive_time_ms", 10_000),
                    ("grpc.keepalive_timeout_ms", 5_000),
                    ("grpc.keepalive_permit_without_calls", 1),
                    # Fail over to the next member quickly when one goes away.
                    ("grpc.initial_reconnect_backoff_ms", 200),
                    ("grpc.max_reconnect_backoff_ms", 2_000),
                ]
                if self._tls:
                    # Multi-endpoint targets have no hostname: check the first one's name.
                    if len(self._endpoints) > 1:
                        options.append(("grpc.ssl_target_name_override", self._endpoints[0][0]))
                    channel = grpc.aio.secure_channel(target, self._credentials(), options)
                else:
                    channel = grpc.aio.insecure_channel(target, options)
                self._channel = channel
                stubs = _Stubs.on(channel)
                if self._settings.username:
                    await self._authenticate(stubs)
                self._stubs = stubs
        assert self._stubs is not None
        return self._stubs

    async def _authenticate(self, stubs: _Stubs) -> None:
        s = self._settings
        if s.password is None:
            raise StoreError("TETHER_STORE_USERNAME is set but TETHER_STORE_PASSWORD is not")
        try:
            response = await stubs.auth.Authenticate(
                rpc.AuthenticateRequest(name=s.username, password=s.password.get_secret_value()),
                timeout=request_timeout_s(s.timeout_s),
                wait_for_ready=True,
            )
        except grpc.aio.AioRpcError as exc:
            raise _translate(exc, "authentication") from exc
        self._metadata = (("token", response.token),)

    async def _unary(self, service: str, method: str, request: Any) -> Any:
        """Calls `method` of etcd's `service` ("kv" or "lease") within the request deadline,
        renewing an expired token once.

        A repeatable call is sent again while etcd answers UNAVAILABLE: a member that dies or
        loses its leader fails the calls in flight ("leader changed", "no leader") although the
        cluster serves again within an election.
        """
        stubs = await self._connect()
        call = getattr(getattr(stubs, service), method)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request_timeout_s(self._settings.timeout_s)
        backoff, max_backoff = _RESEND_BACKOFF_S
        renewed = False
        while True:
            try:
                return await call(
                    request,
                    timeout=max(deadline - loop.time(), 0.0),
                    metadata=self._metadata,
                    wait_for_ready=True,
                )
            except grpc.aio.AioRpcError as exc:
                token_expired = exc.code() == grpc.StatusCode.UNAUTHENTICATED or (
                    "invalid auth token" in (exc.details() or "")
                )
                if token_expired and not renewed and self._settings.username:
                    renewed = True
                    await self._authenticate(stubs)
                    continue
                resend = (
                    method in _REPEATABLE
                    and exc.code() == grpc.StatusCode.UNAVAILABLE
                    and deadline - loop.time() > backoff
                )
                if not resend:
                    raise _translate(exc, f"{method} at {self.url}") from exc
                log.info("etcd %s failed (%s); sending it again", method, exc.details())
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, max_backoff)

    # --- reads -------------------------------------------------------------------------------

    async def revision(self) -> int:
        response = await self._unary("kv", "Range", rpc.RangeRequest(key=b"\0", count_only=True))
        return int(response.header.revision)

    async def get(self, key: str) -> KeyValue | None:
        response = await self._unary("kv", "Range", rpc.RangeRequest(key=key.encode()))
        return _kv(response.kvs[0]) if response.kvs else None

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
            [_kv(kv) for kv in response.kvs],
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
        request = rpc.TxnRequest(
            compare=[_compare(c) for c in compares],
            success=[_request_op(op) for op in success],
            failure=[_request_op(op) for op in failure],
        )
        try:
            response = await self._unary("kv", "Txn", request)
        except LeaseNotFound as exc:
            leases = [op.lease for op in (*success, *failure) if isinstance(op, Put) and op.lease]
            raise LeaseNotFound(leases[0] if leases else 0) from exc
        revision = int(response.header.revision)
        results: list[OpResult] = []
        for item in response.responses:
            kind = item.WhichOneof("response")
            if kind == "response_range":
                results.append(RangeResult([_kv(kv) for kv in item.response_range.kvs], revision))
            elif kind == "response_put":
                results.append(PutResult())
            else:
                results.append(DeleteResult(int(item.response_delete_range.deleted)))
        return TxnResult(bool(response.succeeded), revision, results)

    # --- leases ------------------------------------------------------------------------------

    async def lease_grant(self, ttl_s: int) -> int:
        if ttl_s < 1:
            raise StoreError(f"lease TTL must be at least 1 s, not {ttl_s}")
        response = await self._unary("lease", "LeaseGrant", rpc.LeaseGrantRequest(TTL=ttl_s))
        if response.error:
            raise StoreError(f"etcd refused a lease: {response.error}")
        return int(response.ID)

    async def lease_keepalive(self, lease: int) -> int:
        stubs = await self._connect()
        # The request is written on the stream rather than given as an iterator: gRPC would
        # consume an iterator in a task of its own, which a cancelled renewal (a keeper's
        # timeout) could leave behind, formatting a traceback each time.
        call = stubs.lease.LeaseKeepAlive(
            timeout=request_timeout_s(self._settings.timeout_s),
            metadata=self._metadata,
            wait_for_ready=True,
        )
        try:
            await call.write(rpc.LeaseKeepAliveRequest(ID=lease))
            await call.done_writing()
            response = await call.read()
        except grpc.aio.AioRpcError as exc:
            raise _translate(exc, "lease keepalive") from exc
        finally:
            call.cancel()
        if response is grpc.aio.EOF:  # type: ignore[attr-defined]
            raise StoreUnavailable("etcd closed the lease keepalive stream without an answer")
        if response.TTL <= 0:
            raise LeaseNotFound(lease)
        return int(response.TTL)

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
        for watch in list(self._watches):
            await watch.close()
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None
            self._stubs = None


def _kv(kv: Any) -> KeyValue:
    return KeyValue(
        key=kv.key.decode(),
        value=bytes(kv.value),
        create_revision=int(kv.create_revision),
        mod_revision=int(kv.mod_revision),
        version=int(kv.version),
        lease=int(kv.lease),
    )


def _compare(compare: Compare) -> Any:
    target, field = _COMPARE_TARGET[compare.target]
    message = rpc.Compare(
        result=_COMPARE_RESULT[compare.op], target=target, key=compare.key.encode()
    )
    setattr(message, field, compare.operand)
    return message


def _request_op(op: Op) -> Any:
    if isinstance(op, Put):
        return rpc.RequestOp(
            request_put=rpc.PutRequest(key=op.key.encode(), value=op.value, lease=op.lease)
        )
    range_end = prefix_end(op.key) if op.prefix else b""
    if isinstance(op, Get):
        return rpc.RequestOp(
            request_range=rpc.RangeRequest(key=op.key.encode(), range_end=range_end)
        )
    assert isinstance(op, Delete)
    return rpc.RequestOp(
        request_delete_range=rpc.DeleteRangeRequest(key=op.key.encode(), range_end=range_end)
    )


class _EtcdWatch(Watch):
    """One etcd watch stream; re-created after the last delivered revision when it breaks."""

    def __init__(self, store: EtcdStore, prefix: str, start_revision: int) -> None:
        super().__init__(prefix, start_revision)
        self._store = store
        self._closed = False
        self._call: Any = None

    async def _revisions(self) -> AsyncIterator[list[WatchEvent]]:
        store = self._store
        store._watches.add(self)
        if self.next_revision <= 0:
            self.next_revision = await store.revision() + 1
        backoff = 0.1
        try:
            while not self._closed:
                try:
                    async for events in self._stream():
                        backoff = 0.1
                        yield events
                except (grpc.aio.AioRpcError, StoreUnavailable) as exc:
                    if isinstance(exc, grpc.aio.AioRpcError) and (
                        exc.code() not in _RETRYABLE or self._closed
                    ):
                        raise _translate(exc, "watch") from exc
                    log.info(
                        "etcd watch on %s broke (%s); resuming at revision %d",
                        self.prefix,
                        exc,
                        self.next_revision,
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 2.0)
        finally:
            store._watches.discard(self)

    async def _stream(self) -> AsyncIterator[list[WatchEvent]]:
        stubs = await self._store._connect()
        call = stubs.watch.Watch(metadata=self._store._metadata, wait_for_ready=True)
        self._call = call
        try:
            await call.write(
                rpc.WatchRequest(
                    create_request=rpc.WatchCreateRequest(
                        key=self.prefix.encode(),
                        range_end=prefix_end(self.prefix),
                        start_revision=self.next_revision,
                    )
                )
            )
            while not self._closed:
                try:
                    response = await call.read()
                except asyncio.CancelledError:
                    if self._closed and _not_cancelled_from_outside():
                        return
                    raise
                if response is grpc.aio.EOF:  # type: ignore[attr-defined]
                    raise StoreUnavailable("etcd ended the watch stream")
                if response.compact_revision:
                    raise CompactedError(self.next_revision, int(response.compact_revision))
                if response.canceled:
                    raise StoreError(f"etcd cancelled the watch: {response.cancel_reason}")
                # etcd sends every event of a revision in one response (we never ask for
                # fragments); a response may hold several revisions.
                revisions: list[list[WatchEvent]] = []
                for event in response.events:
                    kv = _kv(event.kv)
                    if event.type == rpc.Event.DELETE:
                        kv = KeyValue(kv.key, b"", 0, kv.mod_revision, 0)
                    if not revisions or revisions[-1][0].revision != kv.mod_revision:
                        revisions.append([])
                    revisions[-1].append(WatchEvent(_EVENT_TYPE[event.type], kv))
                for events in revisions:
                    self.next_revision = events[0].revision + 1
                    yield events
        finally:
            self._call = None
            call.cancel()

    async def close(self) -> None:
        self._closed = True
        if self._call is not None:
            self._call.cancel()


def _not_cancelled_from_outside() -> bool:
    task = asyncio.current_task()
    return task is None or task.cancelling() == 0
