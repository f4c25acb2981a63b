"""Scheduler shard requests and views for operators."""

from __future__ import annotations

from tether.frontend.schemas import View
from tether.model import Name, TetherModel, Timestamp


class NewShard(TetherModel):
    """The body of POST /admin/shards."""

    id: Name
    """The shard id its replicas were started with (`tether scheduler --shard ID`)."""


class ShardMoveRequest(TetherModel):
    """The body of POST /admin/shards/{id}/move."""

    entitlement: Name
    """An entitlement on the shard named in the path."""
    to: Name | None = None
    """The shard that takes it over; default the least-loaded other shard that is not
    draining."""


class ReplicaView(View):
    identity: str
    pid: int
    since: Timestamp


class ShardDetail(View):
    shard: str
    draining: bool
    """Being emptied: new entitlements do not join it."""
    leader: str | None
    """The leading replica's identity; null while the shard has no leader."""
    leader_pid: int | None
    leader_since: Timestamp | None
    lease_expires_at: Timestamp | None
    """When the leader's lease runs out unless renewed (every third of its TTL); a standby
    takes over by then if the leader is dead."""
    standbys: list[ReplicaView]
    """Replicas standing by, oldest first."""
    last_reconcile_at: Timestamp | None
    """When the leader last finished reconciling a job (as of its last report)."""
    reconciles: int | None
    """Reconciles in the leader's term."""
    backlog: int | None
    """Jobs waiting to be reconciled."""
    reported_at: Timestamp | None
    """When the leader last reported; the three fields above are as of then."""
    entitlements: list[str]
    jobs: int
    tasks: int
    machines: int
    """Machines its entitlements own."""
    operations: int
    """Task operations recorded for its jobs."""
    warning: str | None = None
    """Why its entitlements' jobs are not scheduled: it holds some but has no leader."""


class ShardList(View):
    shards: list[ShardDetail]


class MoveView(View):
    entitlement: str
    from_shard: str
    to_shard: str
    revision: int
    """The store revision of the new shard-map entry: the old leader's writes for the
    entitlement's jobs fail from it on."""


class DrainView(View):
    shard: str
    moves: list[MoveView]


class FailoverView(View):
    shard: str
    previous_leader: str
    """The deposed leader's identity: it stands back for a lease TTL."""
    standbys: list[ReplicaView]
    """The standbys that were there to take over; the first to see the key gone leads."""
