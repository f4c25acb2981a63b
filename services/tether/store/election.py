"""Leader election among the replicas of a scheduler shard or of the rebalancer: the leader key
lives on the leader's lease."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import ValidationError

from tether.aio import cancel_and_wait, first_of
from tether.model import ShardLeader, ShardReplica, from_json, to_json
from tether.store import keys
from tether.store.base import (
    CompactedError,
    Compare,
    EventType,
    Get,
    KeyValue,
    Put,
    RangeResult,
    Store,
    StoreError,
    TxnResult,
    WatchEvent,
    key_missing,
    value_is,
)
from tether.store.lease import LeaseKeeper
from tether.store.liveness import LivenessSocket, until_dead

_log = logging.getLogger(__name__)

_RETRY_S = 0.5


def new_identity() -> str:
    """`<hostname>:<pid>:<random>`: unique per process lifetime, readable in the leader key."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class ElectionKeys:
    """Where an election keeps its records: what the leader leads (in records and logs), the
    leader key, and the prefix of every replica's record."""

    group: str
    leader: str
    replicas: str

    @classmethod
    def of_shard(cls, shard: str) -> ElectionKeys:
        return cls(shard, keys.shard_leader(shard), keys.shard_replicas(shard))

    def replica(self, identity: str) -> str:
        return self.replicas + identity


@dataclass(frozen=True, slots=True)
class Fence:
    """The leader key and this replica's exact value in it: every write compares the two."""

    key: str
    value: bytes

    def compare(self) -> Compare:
        return value_is(self.key, self.value)

    def holds_in(self, result: RangeResult) -> bool:
        """Whether a read of the leader key (a failed transaction's `Get`) still shows us."""
        return any(kv.key == self.key and kv.value == self.value for kv in result.kvs)


@dataclass(slots=True)
class Leadership:
    """One term as leader. `lost` is set when the lease is gone or the key no longer holds us."""

    fence: Fence
    lease: int
    """The lease the leader key lives on; records that must die with the term use it too."""
    identity: str
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    deposed: bool = False
    """Set with `lost` when someone else took the key (a failover), not when the lease lapsed."""


class Election:
    """Campaigns for the leader key (`shards/leaders/<shard>` of a shard) until this replica
    holds it.

    The standby keeps a lease of its own and watches the key: when the key is deleted (the
    leader's lease lapsed or was revoked) it tries to create it again at once. It also holds a
    connection to the leader's liveness socket, and revokes the leader's lease as soon as the
    leader's process is gone: a `kill -9` costs a failover of milliseconds, not the rest of a
    lease (a leader that hangs, or whose host dies, is still replaced when its lease lapses).
    Every replica,
    leading or not, announces itself under the replicas' prefix (`shards/replicas/<shard>/`)
    on the same lease, so an operator sees the standbys and a failover knows there is one to
    hand over to.
    """

    def __init__(
        self,
        store: Store,
        where: ElectionKeys,
        ttl_s: int,
        identity: str | None = None,
        *,
        liveness_host: str = "127.0.0.1",
    ) -> None:
        self._store = store
        self._where = where
        self.shard = where.group
        self.key = where.leader
        self.identity = identity or new_identity()
        self._ttl_s = ttl_s
        self._keeper: LeaseKeeper | None = None
        self._guard: asyncio.Task[None] | None = None
        self._liveness = LivenessSocket(liveness_host)
        self.stood_by = 0
        """How often a campaign found the key held and stood by: tests wait for it to know that
        a replica tried and lost, since losing writes nothing."""

    async def campaign(self, *, defer_s: float = 0.0) -> Leadership:
        """Returns once this replica leads the shard. With `defer_s`, it announces itself and
        then stands back that long before contending: a deposed leader lets the standby that
        was handed the shard take it, rather than racing it."""
        await self._liveness.start()
        while True:
            keeper = LeaseKeeper(self._store, self._ttl_s)
            try:
                await keeper.start()
                leadership = await self._contend(keeper, defer_s)
                defer_s = 0.0
            except StoreError as error:
                _log.warning("shard %s: campaign failed, retrying: %s", self.shard, error)
                await keeper.stop()
                await asyncio.sleep(_RETRY_S)
                continue
            except BaseException:
                await keeper.stop()
                raise
            if leadership is not None:
                self._keeper = keeper
                self._guard = asyncio.create_task(
                    self._guard_term(keeper, leadership), name=f"leader guard {self.shard}"
                )
                return leadership
            # The standby's own lease lapsed while it waited: take a fresh one.
            await keeper.stop(revoke=False)

    async def resign(self) -> None:
        """Ends the current term, if any; revoking the lease lets a standby take over at once."""
        await cancel_and_wait(self._guard)
        self._guard = None
        if self._keeper is not None:
            await self._keeper.stop()
            self._keeper = None

    async def close(self) -> None:
        """Resigns, and closes the liveness socket."""
        await self.resign()
        await self._liveness.stop()

    async def _contend(self, keeper: LeaseKeeper, defer_s: float) -> Leadership | None:
        """Creates the key when it is missing, else waits for its deletion; None if the lease
        was lost meanwhile."""
        now = datetime.now(UTC)
        replica = ShardReplica(shard=self.shard, identity=self.identity, pid=os.getpid(), since=now)
        await self._store.put(
            self._where.replica(self.identity), to_json(replica), lease=keeper.lease
        )
        if defer_s:
            await first_of(asyncio.sleep(defer_s), keeper.lost.wait())
        while not keeper.lost.is_set():
            leader = ShardLeader(
                shard=self.shard,
                identity=self.identity,
                pid=os.getpid(),
                since=datetime.now(UTC),
                liveness=self._liveness.address,
            )
            value = to_json(leader)
            result = await self._store.txn(
                (key_missing(self.key),),
                (Put(self.key, value, keeper.lease),),
                (Get(self.key),),
            )
            if result.succeeded:
                _log.info("shard %s: leading as %s", self.shard, self.identity)
                return Leadership(Fence(self.key, value), keeper.lease, self.identity)
            held = _leader_of(result)
            _log.info(
                "shard %s: standing by; %s leads",
                self.shard,
                "nobody" if held is None else held[0].identity,
            )
            self.stood_by += 1
            waits = [self._deleted(result.revision + 1), keeper.lost.wait()]
            if held is not None and held[0].liveness and held[1].lease:
                waits.append(self._revoke_when_dead(*held))
            await first_of(*waits)
        return None

    async def _revoke_when_dead(self, leader: ShardLeader, kv: KeyValue) -> None:
        """Revokes the lease the leader key lives on once the leader's process is gone."""
        assert leader.liveness
        await until_dead(leader.liveness)
        _log.warning(
            "shard %s: the leader %s is gone; revoking its lease", self.shard, leader.identity
        )
        await self._store.lease_revoke(kv.lease)

    async def _deleted(self, start_revision: int) -> None:
        """Returns once the leader key is deleted at or after `start_revision`."""
        await self._watch_until(start_revision, lambda event: event.type is EventType.DELETE)

    async def _changed(self, fence: Fence) -> None:
        """Returns once the leader key stops holding `fence.value`."""
        while True:
            kv = await self._store.get(self.key)
            if kv is None or kv.value != fence.value:
                return
            await self._watch_until(
                kv.mod_revision + 1,
                lambda event: event.type is EventType.DELETE or event.kv.value != fence.value,
            )

    async def _watch_until(self, start_revision: int, stop: Callable[[WatchEvent], bool]) -> None:
        """Watches the leader key from `start_revision` until an event of it satisfies `stop`;
        also returns when the history is compacted (callers then look again)."""
        with contextlib.suppress(CompactedError):
            async with self._store.watch(self.key, start_revision=start_revision) as watch:
                async for events in watch:
                    # The watch is on a prefix: shard-0 also matches shard-01.
                    if any(event.kv.key == self.key and stop(event) for event in events):
                        return

    async def _guard_term(self, keeper: LeaseKeeper, leadership: Leadership) -> None:
        """Sets `leadership.lost` when the lease is lost or someone else's value is in the key
        (an operator deleted it to force a failover)."""
        try:
            await first_of(keeper.lost.wait(), self._changed_retrying(leadership))
        finally:
            leadership.lost.set()

    async def _changed_retrying(self, leadership: Leadership) -> None:
        while True:
            try:
                await self._changed(leadership.fence)
                _log.warning("shard %s: the leader key no longer names us", self.shard)
                leadership.deposed = True
                return
            except StoreError as error:
                # The lease keeper decides whether the store's absence costs us the lease.
                _log.info("shard %s: watching the leader key failed: %s", self.shard, error)
                await asyncio.sleep(_RETRY_S)


def _leader_of(result: TxnResult) -> tuple[ShardLeader, KeyValue] | None:
    """The leader record a failed campaign read, and its key."""
    for kv in result.kvs(0):
        with contextlib.suppress(ValidationError):
            return from_json(ShardLeader, kv.value, stored=True), kv
    return None
