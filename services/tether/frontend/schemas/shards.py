"""Scheduler shard views for operators."""

from __future__ import annotations

from tether.frontend.schemas import View
from tether.model import Timestamp


class ShardDetail(View):
    shard: str
    leader: str | None
    """The leading replica's identity; null while the shard has no leader."""
    leader_pid: int | None
    leader_since: Timestamp | None
    entitlements: list[str]
    jobs: int
    tasks: int
    machines: int
    """Machines its entitlements own."""
    operations: int
    """Task operations recorded for its jobs."""


class ShardList(View):
    shards: list[ShardDetail]
