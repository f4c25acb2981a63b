"""Region-wide records: the region's shards, and who is alive (scheduler leaders, allocators,
agents)."""

from __future__ import annotations

import zlib
from typing import Annotated, Final

from pydantic import Field

from tether.model.base import (
    NO_DUPLICATES,
    Name,
    NonEmptyStr,
    PositiveSeconds,
    TetherModel,
    Timestamp,
)
from tether.model.machine import Machine

DEFAULT_FENCING_S: Final = 10.0
DEFAULT_NON_PREEMPTIBLE_PRIORITY: Final = 500
"""How long an agent that cannot renew its lease keeps its at-most-once tasks running."""


class RegionConfig(TetherModel):
    """Written once when a region is created (`tether up` does it)."""

    name: Name
    shards: Annotated[list[Name], NO_DUPLICATES] = Field(min_length=1)
    """Scheduler shard ids; every entitlement belongs to exactly one. Shards are added with
    `POST /admin/shards`, never removed: a drained shard simply holds nothing."""
    draining: Annotated[list[Name], NO_DUPLICATES] = Field(default_factory=list)
    """Shards being emptied (`POST /admin/shards/{id}/drain`): new entitlements never join them."""
    fencing_s: PositiveSeconds = DEFAULT_FENCING_S
    """The fencing period of at-most-once tasks: an agent whose lease has not been renewed for
    this long kills them, and the scheduler replaces them only once this long (and a margin)
    has passed since their machine went down. Set when the region is created."""
    non_preemptible_priority: int = Field(default=DEFAULT_NON_PREEMPTIBLE_PRIORITY, ge=0, le=1001)
    """Tasks of jobs at this priority or above (the production band) are never preempted;
    1001 protects none. Set when the region is created."""
    created_at: Timestamp


def shard_for(entitlement: str, shards: list[str]) -> str:
    """The shard the bootstrap puts the default entitlement on, before anything has a load: a
    stable hash. Entitlements created later join the least-loaded shard."""
    return shards[zlib.crc32(entitlement.encode()) % len(shards)]


class ShardLeader(TetherModel):
    """The scheduler replica leading a shard; the key lives on that replica's lease."""

    shard: Name
    identity: NonEmptyStr
    """`<hostname>:<pid>:<random>`, unique per process lifetime."""
    pid: int
    since: Timestamp
    liveness: str | None = None
    """`host:port` of the leader's liveness socket: a standby holds a connection to it and, when
    the leader's process ends, revokes its lease rather than wait for it to lapse."""


class ShardReplica(TetherModel):
    """A scheduler replica taking part in its shard's election, leading or standing by; the key
    lives on the replica's campaign lease, so it vanishes with the process."""

    shard: Name
    identity: NonEmptyStr
    pid: int
    since: Timestamp


class ShardStatus(TetherModel):
    """What the shard's leader last reported of its work; looked at every few seconds and
    written when it changed (`updated_at`: when), on the leader's lease, so a dead leader's
    status vanishes with it."""

    shard: Name
    identity: NonEmptyStr
    """The leader that wrote it."""
    jobs: int = Field(ge=0)
    """Jobs the leader reconciles."""
    backlog: int = Field(ge=0)
    """Jobs waiting to be reconciled."""
    reconciles: int = Field(ge=0)
    """Reconciles in this term."""
    last_reconcile_at: Timestamp | None = None
    updated_at: Timestamp


class AllocatorEndpoint(TetherModel):
    """A live allocator replica and where its gRPC server listens; on the replica's lease."""

    id: NonEmptyStr
    address: NonEmptyStr
    """`host:port` for a gRPC channel."""
    pid: int
    since: Timestamp


class BrokerRegistration(TetherModel):
    """A running broker of a datacenter; on the broker's lease. Maintenance of a datacenter's
    machines is refused while none is registered: nobody would carry it out."""

    dc: Name
    pid: int
    since: Timestamp


class AgentHeartbeat(TetherModel):
    """An agent's announcement of its machine; the key lives on the agent's lease.

    The resource broker of the machine's datacenter copies `machine` into the inventory; the
    health checker marks the machine down when the key has been gone for the grace period.
    """

    machine: Machine
    address: NonEmptyStr
    """Base URL of the agent's read-only HTTP endpoint (task logs), e.g. http://127.0.0.1:7001."""
    pid: int
    started_at: Timestamp
