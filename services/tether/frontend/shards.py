"""Scheduler shards: what each holds and who runs it, which one a new entitlement joins, and the
admin's actions on them (add, move an entitlement, fail over, drain)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from tether.frontend import records
from tether.frontend.problems import Conflict, NotFound
from tether.frontend.shard_counts import ShardCounts
from tether.frontend.shard_tally import mapped_shard
from tether.model import RegionConfig, ShardLeader, ShardReplica, ShardStatus, to_json
from tether.store import Delete, Put, Store, keys, mod_revision_is, value_is


@dataclass(slots=True)
class ShardLoad:
    shard: str
    leader: ShardLeader | None = None
    leader_value: bytes = b""
    """The leader key's value as stored, for a failover's compare-and-delete."""
    leader_lease: int = 0
    standbys: list[ShardReplica] = field(default_factory=list)
    """Replicas in the election that do not lead, oldest first."""
    status: ShardStatus | None = None
    """The current leader's last report (another leader's is ignored)."""
    draining: bool = False
    entitlements: list[str] = field(default_factory=list)
    jobs: int = 0
    tasks: int = 0
    machines: int = 0
    """Machines its entitlements own."""
    operations: int = 0
    """Task operations recorded for its jobs (open, or completed and not yet reported)."""


@dataclass(frozen=True, slots=True)
class Move:
    entitlement: str
    source: str
    target: str
    revision: int
    """The store revision of the new shard-map entry: the old leader's writes for the
    entitlement's jobs compare an older one and fail from here on."""


async def shard_members(store: Store, config: RegionConfig) -> list[ShardLoad]:
    """Every shard of the region config with its leader, standbys, status and entitlements as
    the shard map holds them now (nothing counted), in config order."""
    loads = await _elected(store, config)
    by_shard = {load.shard: load for load in loads}
    for kv in (await store.range(keys.SHARD_MAP)).kvs:
        load = by_shard.get(mapped_shard(kv))
        if load is not None:
            load.entitlements.append(keys.last_segment(kv.key))
    return loads


async def shard_loads(store: Store, config: RegionConfig, counts: ShardCounts) -> list[ShardLoad]:
    """Every shard of the region config with what it holds, in config order: its entitlements
    and their jobs, tasks, operations and machines as this frontend's counts have them (no
    record is read or counted for them here)."""
    tally = await counts.tally()
    loads = await _elected(store, config)
    for load in loads:
        held = tally.held(load.shard)
        load.entitlements = list(held.entitlements)
        load.jobs, load.tasks = held.jobs, held.tasks
        load.machines, load.operations = held.machines, held.operations
    return loads


async def _elected(store: Store, config: RegionConfig) -> list[ShardLoad]:
    """Every shard of the region config with its leader, standbys and status, in config
    order."""
    loads = {shard: ShardLoad(shard, draining=shard in config.draining) for shard in config.shards}
    for kv in (await store.range(keys.SHARD_LEADERS)).kvs:
        leader = records.load(ShardLeader, kv)
        if leader.shard in loads:
            loads[leader.shard].leader = leader
            loads[leader.shard].leader_value = kv.value
            loads[leader.shard].leader_lease = kv.lease
    for replica in await records.scan(store, keys.SHARD_REPLICAS, ShardReplica):
        load = loads.get(replica.shard)
        if load is not None and (load.leader is None or load.leader.identity != replica.identity):
            load.standbys.append(replica)
    for status in await records.scan(store, keys.SHARD_STATUS, ShardStatus):
        load = loads.get(status.shard)
        if load is not None and load.leader is not None and load.leader.identity == status.identity:
            load.status = status
    for load in loads.values():
        load.standbys.sort(key=lambda replica: replica.since)
    return list(loads.values())


async def lease_expiry(store: Store, load: ShardLoad) -> datetime | None:
    """When the leader's lease runs out unless the leader renews it (it does every third of
    the TTL); None without a leader."""
    if not load.leader_lease:
        return None
    left = await store.lease_time_to_live(load.leader_lease)
    return None if left is None else datetime.now(UTC) + timedelta(seconds=left)


def stranded(load: ShardLoad) -> str | None:
    """Why the shard's entitlements have nobody to schedule their jobs; None when they do."""
    if not load.entitlements or load.leader is not None:
        return None
    return (
        f"shard '{load.shard}' holds entitlements {', '.join(sorted(load.entitlements))} but "
        f"has no leader: their jobs are not scheduled until `tether scheduler --shard "
        f"{load.shard}` runs"
    )


def least_loaded(loads: list[ShardLoad]) -> str:
    """The shard a new or moved entitlement joins: of those with a leader (a shard without one
    would leave its jobs unscheduled), fewest machines, then fewest tasks, then fewest
    entitlements (new ones own nothing yet), then the first in the region config (so every
    frontend agrees on a tie). Draining shards take none."""
    order = {load.shard: position for position, load in enumerate(loads)}
    open_shards = [load for load in loads if not load.draining]
    if not open_shards:
        raise Conflict("every scheduler shard is draining; add one with POST /admin/shards")
    led = [load for load in open_shards if load.leader is not None]
    if not led:
        names = ", ".join(load.shard for load in open_shards)
        raise Conflict(
            f"no scheduler shard that takes entitlements has a leader ({names}): an entitlement "
            "there would have nobody to schedule its jobs; start their replicas "
            "(`tether scheduler --shard ID`) first"
        )
    return min(
        led,
        key=lambda load: (
            load.machines,
            load.tasks,
            len(load.entitlements),
            order[load.shard],
        ),
    ).shard


async def add_shard(store: Store, shard: str) -> RegionConfig:
    """Adds the shard to the region config: its replicas, which wait for it, start their
    election. A draining shard named again stops draining."""
    stored = await records.region_config_record(store)
    config = stored.model
    if shard in config.shards and shard not in config.draining:
        raise Conflict(f"shard '{shard}' is already in the region")
    changed = config.model_copy(
        update={
            "shards": config.shards if shard in config.shards else [*config.shards, shard],
            "draining": [name for name in config.draining if name != shard],
        }
    )
    await _replace_config(store, stored.kv.mod_revision, changed)
    return changed


async def set_draining(store: Store, shard: str) -> RegionConfig:
    """Marks the shard draining, so no new entitlement joins it."""
    stored = await records.region_config_record(store)
    config = stored.model
    _check_known(config, shard)
    if shard in config.draining:
        return config
    if all(name in config.draining or name == shard for name in config.shards):
        raise Conflict(f"shard '{shard}' is the last one taking entitlements; add one first")
    changed = config.model_copy(update={"draining": [*config.draining, shard]})
    await _replace_config(store, stored.kv.mod_revision, changed)
    return changed


async def _replace_config(store: Store, revision: int, config: RegionConfig) -> None:
    key = keys.region_config()
    result = await store.txn([mod_revision_is(key, revision)], [Put(key, to_json(config))])
    if not result.succeeded:
        raise Conflict("the region config changed meanwhile; try again")


def _check_known(config: RegionConfig, shard: str) -> None:
    if shard not in config.shards:
        raise NotFound(f"no shard '{shard}' in the region (shards: {', '.join(config.shards)})")


async def move_entitlement(
    store: Store,
    counts: ShardCounts,
    config: RegionConfig,
    source: str,
    entitlement: str,
    target: str | None,
) -> Move:
    """Maps the entitlement from `source` to `target` (default: the least-loaded other shard).

    One compare-and-swap of the shard-map entry: the old leader's writes for the
    entitlement's jobs fail from that revision on, the new leader's mirror picks the jobs up
    and reconciles them from the store. Tasks keep running: nothing is released or restarted.
    Returns once `counts` hold the move, so what this frontend answers next shows it.
    """
    _check_known(config, source)
    if target is not None:
        _check_known(config, target)
        if target == source:
            raise Conflict(f"entitlement '{entitlement}' is already on shard '{source}'")
        if target in config.draining:
            raise Conflict(f"shard '{target}' is draining and takes no entitlements")
        if await store.get(keys.shard_leader(target)) is None:
            raise Conflict(
                f"shard '{target}' has no leader: the jobs of entitlement '{entitlement}' would "
                f"not be scheduled there; start `tether scheduler --shard {target}` first"
            )
    key = keys.shard_assignment(entitlement)
    current = await store.get(key)
    if current is None:
        raise NotFound(f"no entitlement '{entitlement}' in the shard map")
    if mapped_shard(current) != source:
        raise Conflict(
            f"entitlement '{entitlement}' is on shard '{mapped_shard(current)}', not '{source}'"
        )
    if target is None:
        loads = await shard_loads(store, config, counts)
        others = [load for load in loads if load.shard != source]
        if not others:
            raise Conflict(f"shard '{source}' is the only shard; add one first")
        target = least_loaded(others)
    result = await store.txn([value_is(key, current.value)], [Put(key, target.encode())], [])
    if not result.succeeded:
        raise Conflict(f"entitlement '{entitlement}' moved meanwhile; look again")
    await counts.wait_for(keys.SHARD_MAP, result.revision)
    return Move(entitlement, source, target, result.revision)


async def drain(store: Store, counts: ShardCounts, source: str) -> list[Move]:
    """Marks the shard draining and moves each of its entitlements to the least-loaded shard
    that is not draining, one by one (so each move sees the loads the previous one made).
    Refused, changing nothing, when no other shard with a leader could take them. Its
    entitlements are read from the shard map itself, not the counts: one created through
    another frontend a moment ago must not stay behind."""
    before = await records.region_config(store)
    _check_known(before, source)
    members = await shard_members(store, before)
    held = next(load for load in members if load.shard == source).entitlements
    others = [m for m in members if m.shard != source and not m.draining]
    # With no other open shard at all, marking it draining is refused as the last one.
    if held and others and not any(m.leader for m in others):
        raise Conflict(
            f"no other shard with a leader takes entitlements: draining '{source}' would leave "
            f"{', '.join(sorted(held))} with nobody to schedule their jobs; add a shard and "
            "start its replicas first"
        )
    config = await set_draining(store, source)
    return [
        await move_entitlement(store, counts, config, source, entitlement, None)
        for entitlement in sorted(held)
    ]


async def failover(store: Store, config: RegionConfig, shard: str) -> ShardLoad:
    """Deletes the leader key, if a standby exists to take it: the leader sees it is deposed
    and stands back for a lease TTL, a standby's election creates the key at once. Returns the
    shard as it was."""
    _check_known(config, shard)
    load = next(load for load in await shard_members(store, config) if load.shard == shard)
    if load.leader is None:
        raise Conflict(f"shard '{shard}' has no leader to fail over from; its replicas elect one")
    if not load.standbys:
        raise Conflict(
            f"shard '{shard}' has no standby to hand over to; start another "
            f"`tether scheduler --shard {shard}` first"
        )
    key = keys.shard_leader(shard)
    result = await store.txn([value_is(key, load.leader_value)], [Delete(key)], [])
    if not result.succeeded:
        raise Conflict(f"the leader of shard '{shard}' changed meanwhile; look again")
    return load
