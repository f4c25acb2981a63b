"""Which etcd member a store client talks to: one channel per member, and the member in use
checked twice a second, so that a member that answers but is no use (no leader, far behind, an
alarm) or does not answer at all is left for a healthy one.

gRPC's pick_first over all members would stay connected to a member that runs but is cut off
from the others: its requests would fail or hang until it rejoined.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import grpc
import grpc.aio
from aetcd import rpc

from tether.aio import cancel_and_wait, every

log = logging.getLogger(__name__)

HEALTH_INTERVAL_S: Final = 0.25
"""How often the member in use is checked (and at once after a failed request): a silent
member is left within this plus STATUS_TIMEOUT_S (0.75 s). A lease renewed every third of its
TTL survives that with time to spare even at a TTL of 2 s: the renewal stuck on the silent
member is sent again to the next one at once (`LeaseKeeper`)."""
STATUS_TIMEOUT_S: Final = 0.5
MAX_APPLY_LAG: Final = 1000
"""Committed entries a member may have left to apply before it counts as behind."""

Endpoint = tuple[str, int]
Metadata = Callable[[], tuple[tuple[str, str], ...]]


@dataclass(frozen=True, slots=True)
class Stubs:
    """etcd's services on one channel, made once: building stubs per request costs CPU."""

    kv: Any
    lease: Any
    watch: Any
    auth: Any
    maintenance: Any

    @classmethod
    def on(cls, channel: grpc.aio.Channel) -> Stubs:
        return cls(
            rpc.KVStub(channel),
            rpc.LeaseStub(channel),
            rpc.WatchStub(channel),
            rpc.AuthStub(channel),
            rpc.MaintenanceStub(channel),
        )


def address(endpoint: Endpoint) -> str:
    host, port = endpoint
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Members:
    """The store client's channel to each member (opened when first used) and the member in
    use. `switched()` is called after every change of member, for the long-lived streams to be
    opened again on the new one; requests in flight on the old one are cancelled."""

    def __init__(
        self,
        endpoints: list[Endpoint],
        open_channel: Callable[[Endpoint], grpc.aio.Channel],
        metadata: Metadata,
        switched: Callable[[], None],
    ) -> None:
        self._endpoints = endpoints
        self._open_channel = open_channel
        self._metadata = metadata
        self._switched = switched
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._stubs: dict[int, Stubs] = {}
        self.current = 0
        self._in_flight: dict[int, set[Any]] = {}
        self._checker: asyncio.Task[None] | None = None
        self._suspect = asyncio.Event()
        self._complained = False

    @property
    def address(self) -> str:
        """`host:port` of the member in use."""
        return address(self._endpoints[self.current])

    def stubs(self) -> Stubs:
        """The member in use's stubs; with several members, starts checking them."""
        if self._checker is None and len(self._endpoints) > 1:
            checking = every(HEALTH_INTERVAL_S, self._check_now, wake=self._suspect)
            self._checker = asyncio.create_task(checking, name="etcd members")
        return self._stubs_of(self.current)

    def _stubs_of(self, member: int) -> Stubs:
        stubs = self._stubs.get(member)
        if stubs is None:
            channel = self._open_channel(self._endpoints[member])
            self._channels[member] = channel
            stubs = self._stubs[member] = Stubs.on(channel)
        return stubs

    @contextlib.contextmanager
    def tracking(self, call: Any) -> Iterator[None]:
        """Cancels `call` should the client leave the member it was sent to."""
        member = self.current
        calls = self._in_flight.setdefault(member, set())
        calls.add(call)
        try:
            yield
        finally:
            calls.discard(call)

    def suspect(self) -> None:
        """A request failed: check the member in use now."""
        self._suspect.set()

    async def _check_now(self) -> None:
        """One check, run every HEALTH_INTERVAL_S or as soon as a request fails."""
        try:
            await self.check()
        except Exception:
            log.exception("checking the etcd members failed")

    async def check(self) -> None:
        """Leaves the member in use for the most up-to-date healthy one, if it is unhealthy."""
        trouble, _ = await self.health(self.current)
        if trouble is None:
            self._complained = False
            return
        others = [m for m in range(len(self._endpoints)) if m != self.current]
        verdicts = await asyncio.gather(*(self.health(m) for m in others))
        healthy = [
            (applied, m) for m, (why, applied) in zip(others, verdicts, strict=True) if why is None
        ]
        if not healthy:
            if not self._complained:
                log.warning(
                    "etcd member %s is unhealthy (%s), and no other member is healthy",
                    self.address,
                    trouble,
                )
                self._complained = True
            return
        _, best = max(healthy)
        log.warning(
            "leaving etcd member %s (%s) for %s",
            self.address,
            trouble,
            address(self._endpoints[best]),
        )
        old, self.current = self.current, best
        self._complained = False
        for call in self._in_flight.pop(old, set()):
            call.cancel()
        self._switched()

    async def health(self, member: int) -> tuple[str | None, int]:
        """Why the member is no use (None: it is fine), and how far it has applied the log."""
        try:
            status = await self._stubs_of(member).maintenance.Status(
                rpc.StatusRequest(), timeout=STATUS_TIMEOUT_S, metadata=self._metadata()
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                return None, 0  # it answers; only a request can tell more
            return f"it does not answer: {exc.code().name}", 0
        applied = int(status.raftAppliedIndex)
        if not status.leader:
            return "it has no leader: it is cut off from a quorum", applied
        if status.errors:
            return f"it reports {'; '.join(status.errors)}", applied
        lag = int(status.raftIndex) - applied
        if lag > MAX_APPLY_LAG:
            return f"it has {lag} committed entries left to apply", applied
        return None, applied

    async def close(self) -> None:
        await cancel_and_wait(self._checker)
        self._checker = None
        for channel in self._channels.values():
            await channel.close(grace=None)
        self._channels.clear()
        self._stubs.clear()
