"""The region summary: shards and their leaders, allocators, machines, jobs and tasks."""

from __future__ import annotations

from pydantic import Field

from tether.frontend.schemas import View
from tether.model import AllocatorEndpoint, Timestamp


class ShardView(View):
    shard: str
    leader: str | None
    """The leading scheduler replica's identity; null while the shard has no leader."""
    leader_since: Timestamp | None
    entitlements: list[str]


class MachineCounts(View):
    """How many machines the region has, in total and in each state."""

    total: int
    up: int
    draining: int
    maintenance: int
    down: int
    decommissioned: int


class RegionView(View):
    name: str
    shards: list[ShardView]
    allocators: list[AllocatorEndpoint]
    machines: MachineCounts
    jobs: int
    tasks: dict[str, int] = Field(description="Task count by effective state; every state listed.")
