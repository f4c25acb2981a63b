"""Scheduler shards: what each holds (entitlements, jobs, tasks, machines, open operations), and
which one a new entitlement joins."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from tether.frontend import records
from tether.model import ShardLeader
from tether.store import Store, keys


@dataclass(slots=True)
class ShardLoad:
    shard: str
    leader: ShardLeader | None = None
    entitlements: list[str] = field(default_factory=list)
    jobs: int = 0
    tasks: int = 0
    machines: int = 0
    """Machines its entitlements own."""
    operations: int = 0
    """Task operations recorded for its jobs (open, or completed and not yet reported)."""


async def shard_members(store: Store, shards: list[str]) -> list[ShardLoad]:
    """Every shard of the region config with its leader and entitlements (nothing counted
    yet), in config order."""
    loads = {shard: ShardLoad(shard) for shard in shards}
    for leader in await records.scan(store, keys.SHARD_LEADERS, ShardLeader):
        if leader.shard in loads:
            loads[leader.shard].leader = leader
    for kv in (await store.range(keys.SHARD_MAP)).kvs:
        shard = kv.value.decode().strip()
        if shard in loads:
            loads[shard].entitlements.append(keys.last_segment(kv.key))
    return list(loads.values())


async def shard_loads(store: Store, shards: list[str]) -> list[ShardLoad]:
    """Every shard of the region config with what it holds, in config order."""
    loads = await shard_members(store, shards)
    owned = Counter(
        allocation.record.entitlement
        for allocation in (await records.allocations(store)).values()
        if allocation.record is not None and allocation.record.entitlement is not None
    )
    for load in loads:
        for entitlement in load.entitlements:
            load.machines += owned[entitlement]
            load.jobs += await store.count(keys.jobs_of(entitlement))
            load.tasks += await store.count(keys.tasks_of_entitlement(entitlement))
            load.operations += await store.count(keys.operations_of_entitlement(entitlement))
    return loads


def least_loaded(loads: list[ShardLoad]) -> str:
    """The shard a new entitlement joins: fewest machines, then fewest tasks, then the first in
    the region config (so every frontend agrees on a tie)."""
    order = {load.shard: position for position, load in enumerate(loads)}
    return min(loads, key=lambda load: (load.machines, load.tasks, order[load.shard])).shard
