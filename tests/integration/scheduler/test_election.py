"""Leader election of a shard: one leader, failover within the lease TTL, fenced writes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.waiting import eventually
from tether.model import ShardLeader, ShardReplica, Task, from_json
from tether.scheduler.allocator_client import PlaceResult
from tether.scheduler.executor import Executor, NotLeader, NotOwner, OwnedAt
from tether.scheduler.plan import TaskWrite
from tether.scheduler.service import Scheduler
from tether.scheduler.settings import SchedulerSettings
from tether.store import Store, keys, open_store
from tether.store.election import Election, ElectionKeys

SHARD = "shard-0"
LEADER_KEY = keys.shard_leader(SHARD)
TTL_S = 2
"""The lease of replicas whose failover a test waits out."""
LONG_TTL_S = 30
"""The lease of replicas whose failover must not wait for the lease."""
STEADY_TTL_S = 10
"""The lease of in-process replicas in tests that end a term themselves: a loaded machine's
stall of a second or two must not end it first."""

Spawn = Callable[[str, int], subprocess.Popen[bytes]]


@pytest.fixture
def spawn(store_url: str, tmp_path: Path) -> Iterator[Spawn]:
    """Starts `tether scheduler --shard shard-0` processes; kills whatever is left at the end."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, ttl_s: int) -> subprocess.Popen[bytes]:
        env = {**os.environ, "TETHER_SCHEDULER_LEASE_TTL_S": str(ttl_s)}
        command = [sys.executable, "-m", "tether.cli.main", "scheduler", "--shard", SHARD]
        with (tmp_path / f"{name}.log").open("wb") as log:
            process = subprocess.Popen(
                [*command, "--store", store_url],
                env=env,
                cwd=tmp_path,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        processes.append(process)
        return process

    try:
        yield start
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)


async def leader(store: Store) -> ShardLeader | None:
    kv = await store.get(LEADER_KEY)
    return None if kv is None else from_json(ShardLeader, kv.value, stored=True)


async def elect_of_two(
    store: Store, spawn: Spawn, tmp_path: Path, ttl_s: int
) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
    """Starts two replicas; returns the leader and the standby once the standby stands by."""
    first, second = spawn("a", ttl_s), spawn("b", ttl_s)
    elected = await eventually(lambda: leader(store), timeout_s=30, what="a leader")
    assert elected.shard == SHARD
    assert elected.pid in (first.pid, second.pid)
    assert await store.count(keys.SHARD_LEADERS) == 1
    victim, survivor = (first, second) if elected.pid == first.pid else (second, first)
    survivor_log = tmp_path / ("a.log" if survivor is first else "b.log")

    async def standing_by() -> bool:
        return "standing by" in survivor_log.read_text()

    await eventually(standing_by, timeout_s=30, what="the standby")
    return victim, survivor


async def leads_after(store: Store, replica: subprocess.Popen[bytes], since: datetime) -> float:
    """Seconds from `since` until `replica` took the lead, by its own stamp of its win (not by
    when this test's polling saw it)."""

    async def replica_leads() -> ShardLeader | None:
        now = await leader(store)
        return now if now is not None and now.pid == replica.pid else None

    successor = await eventually(replica_leads, timeout_s=LONG_TTL_S, what="the standby leading")
    return (successor.since - since).total_seconds()


async def test_standby_takes_over_at_once_when_the_leader_is_killed(
    store: Store, spawn: Spawn, tmp_path: Path
) -> None:
    victim, survivor = await elect_of_two(store, spawn, tmp_path, LONG_TTL_S)

    killed_at = datetime.now(UTC)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)

    # Long before the lease's 20 to 30 s left could lapse: the standby saw the process end.
    took = await leads_after(store, survivor, killed_at)
    assert took < LONG_TTL_S / 3, f"the standby took {took:.1f} s to lead"
    assert await store.count(keys.SHARD_LEADERS) == 1

    # A clean stop revokes the lease: the key is gone as soon as the process has exited.
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(15) == 0
    assert await store.get(LEADER_KEY) is None


# etcd only: a SQLite store's writers share one lock, and a process stopped inside one of its
# writes (a lease renewal, every few hundred ms here) holds it until it resumes, so nobody can
# expire its lease meanwhile (docs/benchmarks.md, "Scheduler failover").
@pytest.mark.parametrize("store_url", ["etcd"], indirect=True)
async def test_a_hung_leader_is_replaced_when_its_lease_lapses(
    store: Store, spawn: Spawn, tmp_path: Path
) -> None:
    hung, survivor = await elect_of_two(store, spawn, tmp_path, TTL_S)

    # Stopped, its process lives on, and so does the connection to its liveness socket.
    stopped_at = datetime.now(UTC)
    hung.send_signal(signal.SIGSTOP)
    try:
        took = await leads_after(store, survivor, stopped_at)
        assert took <= TTL_S + 2, f"the standby took {took:.1f} s to lead"
    finally:
        hung.send_signal(signal.SIGCONT)
    assert await store.count(keys.SHARD_LEADERS) == 1


async def test_clean_stop_hands_over_at_once(store_url: str) -> None:
    settings = SchedulerSettings(lease_ttl_s=10, resync_s=1)
    first = Scheduler(open_store(store_url), SHARD, settings)
    second = Scheduler(open_store(store_url), SHARD, settings)
    try:
        await first.start()
        await asyncio.wait_for(first.leading.wait(), 10)
        await second.start()
        await eventually(
            lambda: second.election.stood_by > 0,
            what="the second replica to stand by",
        )
        assert not second.leading.is_set()

        await first.stop()
        # Sooner than the 10 s lease could have lapsed: the stop revoked it.
        await asyncio.wait_for(second.leading.wait(), settings.lease_ttl_s - 2)
    finally:
        await first.stop()
        await second.stop()


class UnusedAllocator:
    async def place(
        self,
        job_handle: str,
        indexes: Sequence[int],
        generation: int,
        request_id: str,
        *,
        preferred: Mapping[int, str] | None = None,
    ) -> PlaceResult:
        raise AssertionError("not called")

    async def release(
        self, job_handle: str, indexes: Sequence[int], *, return_emptied: bool = False
    ) -> int:
        raise AssertionError("not called")


def pending_task() -> Task:
    return Task(job="ads/web", index=0, generation=1, version="1.0", updated_at=datetime.now(UTC))


async def test_a_deposed_leaders_writes_are_fenced(store: Store) -> None:
    old = Election(store, ElectionKeys.of_shard(SHARD), STEADY_TTL_S, identity="old")
    new = Election(store, ElectionKeys.of_shard(SHARD), STEADY_TTL_S, identity="new")
    try:
        old_term = await old.campaign()
        campaign = asyncio.create_task(new.campaign())
        await eventually(lambda: new.stood_by > 0, what="the new replica to stand by")
        assert not campaign.done()

        # The old leader's lease lapses (as in a partition): the standby takes over.
        kv = await store.get(LEADER_KEY)
        assert kv is not None
        await store.lease_revoke(kv.lease)
        new_term = await asyncio.wait_for(campaign, 5)
        await asyncio.wait_for(old_term.lost.wait(), 5)
        assert new_term.fence.value != old_term.fence.value
        current = await leader(store)
        assert current is not None
        assert current.identity == "new"

        owned_at = await map_entitlement(store, "ads", SHARD)
        write = [TaskWrite(0, 0, pending_task())]
        with pytest.raises(NotLeader):
            await Executor(store, old_term.fence, UnusedAllocator(), owned_at).commit(
                "ads/web", write
            )
        assert await store.get(keys.task("ads", "web", 0)) is None

        assert await Executor(store, new_term.fence, UnusedAllocator(), owned_at).commit(
            "ads/web", write
        )
        assert await store.get(keys.task("ads", "web", 0)) is not None
    finally:
        await old.resign()
        await new.resign()


async def map_entitlement(store: Store, entitlement: str, shard: str) -> OwnedAt:
    """Maps the entitlement to the shard; returns the ownership a leader of it would see."""
    revision = await store.put(keys.shard_assignment(entitlement), shard.encode())
    return lambda name: revision if name == entitlement else None


async def test_writes_for_a_moved_entitlement_are_fenced(store: Store) -> None:
    election = Election(store, ElectionKeys.of_shard(SHARD), STEADY_TTL_S, identity="leader")
    try:
        term = await election.campaign()
        owned_at = await map_entitlement(store, "ads", SHARD)
        executor = Executor(store, term.fence, UnusedAllocator(), owned_at)
        assert await executor.commit("ads/web", [TaskWrite(0, 0, pending_task())])

        # An admin moves the entitlement away and back: either way this leader's view of it
        # is from before the move, so none of its writes may land.
        await map_entitlement(store, "ads", "shard-1")
        await map_entitlement(store, "ads", SHARD)
        second = pending_task().model_copy(update={"index": 1})
        with pytest.raises(NotOwner):
            await executor.commit("ads/web", [TaskWrite(1, 0, second)])
        assert await store.get(keys.task("ads", "web", 1)) is None
        # Another entitlement's jobs are not this shard's at all.
        with pytest.raises(NotOwner):
            await executor.commit("other/api", [TaskWrite(0, 0, pending_task())])
        assert await store.get(keys.task("other", "api", 0)) is None
    finally:
        await election.resign()


async def test_every_replica_is_announced_and_a_deposed_leader_knows_it(store: Store) -> None:
    first = Election(store, ElectionKeys.of_shard(SHARD), STEADY_TTL_S, identity="first")
    second = Election(store, ElectionKeys.of_shard(SHARD), STEADY_TTL_S, identity="second")
    try:
        term = await first.campaign()
        campaign = asyncio.create_task(second.campaign())

        async def both_announced() -> list[str] | None:
            replicas = [
                from_json(ShardReplica, kv.value, stored=True).identity
                for kv in (await store.range(keys.shard_replicas(SHARD))).kvs
            ]
            return sorted(replicas) if len(replicas) == 2 else None

        assert await eventually(both_announced, timeout_s=5, what="two replicas") == [
            "first",
            "second",
        ]
        # A failover deletes the leader key: the leader learns it was deposed, not that its
        # lease lapsed, and the standby takes the key.
        await store.delete(LEADER_KEY)
        await asyncio.wait_for(term.lost.wait(), 5)
        assert term.deposed
        assert (await asyncio.wait_for(campaign, 5)).identity == "second"
    finally:
        await first.resign()
        await second.resign()
    assert await store.count(keys.shard_replicas(SHARD)) == 0
