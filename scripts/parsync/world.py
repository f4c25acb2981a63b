"""The ParSync simulator's world: allocator replicas, each with an index of its own, planning with
the allocator's own planner and group-commit functions, and syncing their view of a shared store
(`Truth`) by watch, by a one-shot read every period, or by ParSync's own partitions
(`allocator.index.parsync`); a commit succeeds only if every machine it touches is as the
replica saw it, as the store's compares decide. A simulated clock drives them."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tests.support.allocator_builders import Region, entitlement, job, machine
from tether.allocator.group_commit import place_tentatively
from tether.allocator.index import FREE
from tether.allocator.index.parsync import PartitionedSync, within
from tether.allocator.placement import Choice
from tether.model import Entitlement, Job, Resources
from tether.store import KeyValue, keys

CORES, MEMORY_MIB = 16, 64 * 1024
SHAPES = (Resources(cpu=1000, memory_mib=2048), Resources(cpu=2000, memory_mib=8192))
MAX_ATTEMPTS = 10
ARRIVE, DEPART, SYNC, DELIVER = 0, 1, 2, 3


class Truth:
    """The store's `allocations/`: a region index of what is committed, every key's mod
    revision, and the keys of each machine."""

    def __init__(self, region: Region) -> None:
        self.region = region
        self.revisions: dict[str, int] = {}
        self.keys_of: dict[str, set[str]] = {}

    @property
    def revision(self) -> int:
        return self.region.revision

    def kvs(self, machine_ids: set[str]) -> list[KeyValue]:
        store = self.region.store
        return [
            KeyValue(key, store[key], 1, self.revisions.get(key, 1), 1)
            for machine_id in sorted(machine_ids)
            for key in sorted(self.keys_of.get(machine_id, ()))
        ]

    def commit(self, placed: Job, owner: Entitlement, choice: Choice) -> int:
        revision = self.region.commit(placed, owner, choice)
        ids = self.region.index.ids
        for row in {*choice.placements.values(), *choice.joined}:
            self._wrote(ids[row], keys.allocation(ids[row]), revision)
        entitlement_name, job_name = placed.spec.entitlement, placed.spec.name
        for task, row in choice.placements.items():
            key = keys.allocation_entry(ids[row], entitlement_name, job_name, task)
            self._wrote(ids[row], key, revision)
        return revision

    def release(self, placed: Job, task: int) -> str:
        """Removes the task as Release does; a machine left empty goes back to the free pool at
        once (the allocator waits its idle delay). Returns its machine."""
        index, region = self.region.index, self.region
        row = index.held(placed.handle)[task]
        machine_id = index.ids[row]
        region.revision += 1
        header = FREE if int(index.task_count[row]) == 1 else index.header(row)
        index.remove(row, placed.handle, [task], header, region.revision)
        key = keys.allocation_entry(machine_id, placed.spec.entitlement, placed.spec.name, task)
        region.store.pop(key, None)
        self.revisions.pop(key, None)
        self.keys_of[machine_id].discard(key)
        region.store[keys.allocation(machine_id)] = index.header_json(row)
        self._wrote(machine_id, keys.allocation(machine_id), region.revision)
        return machine_id

    def _wrote(self, machine_id: str, key: str, revision: int) -> None:
        self.revisions[key] = revision
        self.keys_of.setdefault(machine_id, set()).add(key)


@dataclass(slots=True)
class Stats:
    requests: int = 0
    attempts: int = 0
    conflicts: int = 0
    gave_up: int = 0
    unplaced: int = 0
    tasks: int = 0
    fresh_choices: int = 0
    """Tasks placed where a replica with a current view would have put them."""
    staleness_s: list[float] = field(default_factory=list)
    """Per placed task, the age of the replica's view of its machine."""
    view_ages_s: list[float] = field(default_factory=list)
    """Per request, the mean age of the replica's view of every machine."""


class Replica:
    """An allocator replica: its own index (loaded from the truth), synced by its mode."""

    def __init__(self, truth: Truth, period_s: float, partitions: int) -> None:
        self.region = Region()
        self.sync = PartitionedSync(
            None,  # type: ignore[arg-type]  # the simulator reads the truth itself
            self.region.index,
            period_s=period_s,
            partitions=partitions,
        )
        self.read_at: dict[str, float] = {}
        self.next_partition = 0
        self._truth = truth

    def read(self, machine_ids: set[str], now_s: float) -> None:
        """Reads the machines' records from the truth, as ParSync applies a partition."""
        self.sync.apply(machine_ids, self._truth.kvs(machine_ids), self._truth.revision)
        for machine_id in machine_ids:
            self.read_at[machine_id] = now_s

    def read_partition(self, now_s: float) -> None:
        first, upper = self.sync.bounds(self.next_partition)
        self.next_partition = (self.next_partition + 1) % self.sync.partitions
        ids = [m for m in self.region.index.machines_present() if within(first, upper, m)]
        self.read(set(ids), now_s)


class World:
    """`machines` machines, `replicas` allocator replicas syncing by `mode` ("watch" with a
    delay of `watch_delay_s`, "oneshot" or "parsync" every `period_s`), `teams` entitlements
    whose jobs go to the replicas in turn. Without `read_on_conflict` a replica plans again on
    what it had (as schedulers that wait for their next sync do), not on the machines read."""

    def __init__(
        self,
        *,
        machines: int,
        replicas: int,
        teams: int,
        mode: str,
        period_s: float,
        partitions: int,
        watch_delay_s: float,
        read_on_conflict: bool = True,
    ) -> None:
        self.truth = Truth(Region())
        self.machine_ids = [f"m{n:05d}" for n in range(machines)]
        self.teams = [entitlement(f"team{t}", cpu=10**9, memory=10**9) for t in range(teams)]
        self.mode, self.period_s, self.watch_delay_s = mode, period_s, watch_delay_s
        self.read_on_conflict = read_on_conflict
        parts = 1 if mode == "oneshot" else partitions
        self.replicas = [Replica(self.truth, period_s, parts) for _ in range(replicas)]
        for region in (self.truth.region, *(r.region for r in self.replicas)):
            for number, machine_id in enumerate(self.machine_ids):
                region.add(
                    machine(
                        machine_id,
                        msb=f"msb{number % 8}",
                        rack=f"r{number // 32}",
                        cpu=CORES * 1000,
                        memory=MEMORY_MIB,
                    )
                )
            region.entitle(*self.teams)
        self.stats = Stats()
        self.now_s = 0.0
        self._events: list[tuple[float, int, int, Any]] = []
        self._sequence = 0

    def run(self, arrivals: list[tuple[float, int, int, int, float]], horizon_s: float) -> Stats:
        """Plays `arrivals` (time, team, shape, count, lifetime) to `horizon_s`."""
        for arrival in arrivals:
            self._at(arrival[0], ARRIVE, arrival)
        if self.mode != "watch":
            for number, replica in enumerate(self.replicas):
                # Replicas read at offsets of their own, as independent processes would.
                offset = (number / len(self.replicas)) * self.period_s / replica.sync.partitions
                self._at(offset, SYNC, replica)
        for replica in self.replicas:
            replica.read(set(self.machine_ids), 0.0)
        jobs = 0
        while self._events and self._events[0][0] <= horizon_s:
            self.now_s, kind, _, payload = heapq.heappop(self._events)
            if kind == ARRIVE:
                self._arrive(jobs, *payload[1:])
                jobs += 1
            elif kind == DEPART:
                self._depart(*payload)
            elif kind == SYNC:
                payload.read_partition(self.now_s)
                self._at(self.now_s + self.period_s / payload.sync.partitions, SYNC, payload)
            else:
                replica, machine_ids = payload
                replica.read(machine_ids, self.now_s)
        return self.stats

    def _at(self, time_s: float, kind: int, payload: Any) -> None:
        self._sequence += 1
        heapq.heappush(self._events, (time_s, kind, self._sequence, payload))

    def _arrive(self, number: int, team: int, shape: int, count: int, lifetime_s: float) -> None:
        owner = self.teams[team]
        resources = SHAPES[shape]
        spec = job(
            f"j{number:06d}",
            entitlement=owner.name,
            count=count,
            cpu=resources.cpu,
            memory=resources.memory_mib,
        )
        replica = self.replicas[number % len(self.replicas)]
        placed = self._place(replica, spec, owner)
        for task in placed:
            self._at(self.now_s + lifetime_s, DEPART, (replica, spec, task))

    def _place(self, replica: Replica, spec: Job, owner: Entitlement) -> list[int]:
        """Plans on the replica's view, commits if every touched machine is as it saw it, and
        otherwise reads those machines at once and plans again (`Engine.place` in short)."""
        stats = self.stats
        stats.requests += 1
        stats.view_ages_s.append(
            float(np.mean([self._age(replica, machine_id) for machine_id in self.machine_ids]))
        )
        indexes = list(range(spec.spec.count))
        index = replica.region.index
        for _ in range(MAX_ATTEMPTS):
            choice = replica.region.choose(spec, owner, indexes)
            if not choice.placements:
                stats.unplaced += len(indexes)
                return []
            stats.attempts += 1
            fresh = self.truth.region.choose(spec, owner, indexes).placements
            snapshot, _ = place_tentatively(index, spec, owner, choice)
            rows = snapshot.rows.tolist()
            truth_revisions = self.truth.region.index.revision[snapshot.rows]
            if (truth_revisions == snapshot.revisions).all():
                revision = self.truth.commit(spec, owner, choice)
                index.confirm(rows, revision)
                self._delivered(replica, {index.ids[row] for row in rows})
                for task, row in choice.placements.items():
                    stats.tasks += 1
                    stats.fresh_choices += fresh.get(task) == row
                    stats.staleness_s.append(self._age(replica, index.ids[row]))
                stats.unplaced += len(choice.unplaced)
                return list(choice.placements)
            stats.conflicts += 1
            index.roll_back(snapshot)
            if self.read_on_conflict:
                replica.read({index.ids[row] for row in rows}, self.now_s)
        stats.gave_up += 1
        return []

    def _depart(self, replica: Replica, spec: Job, task: int) -> None:
        machine_id = self.truth.release(spec, task)
        replica.read({machine_id}, self.now_s)  # its own Release, in its index at once
        self._delivered(replica, {machine_id})

    def _delivered(self, writer: Replica, machine_ids: set[str]) -> None:
        """With watches, the other replicas see the change after the watch's delay."""
        if self.mode != "watch":
            return
        for replica in self.replicas:
            if replica is not writer:
                self._at(self.now_s + self.watch_delay_s, DELIVER, (replica, machine_ids))

    def _age(self, replica: Replica, machine_id: str) -> float:
        if self.mode == "watch":
            return self.watch_delay_s
        return self.now_s - replica.read_at.get(machine_id, 0.0)


def arrivals(
    *, rate_per_s: float, horizon_s: float, teams: int, lifetime_s: float, seed: int
) -> list[tuple[float, int, int, int, float]]:
    """Poisson job arrivals: (time, team, shape, count 1-8, exponential lifetime)."""
    rng = np.random.default_rng(seed)
    found: list[tuple[float, int, int, int, float]] = []
    now_s = 0.0
    while True:
        now_s += float(rng.exponential(1 / rate_per_s))
        if now_s > horizon_s:
            return found
        found.append(
            (
                now_s,
                int(rng.integers(teams)),
                int(rng.integers(len(SHAPES))),
                int(rng.integers(1, 9)),
                float(rng.exponential(lifetime_s)),
            )
        )


def summary(stats: Stats) -> dict[str, float]:
    ages = np.array(stats.staleness_s) if stats.staleness_s else np.zeros(1)
    return {
        "conflict_rate": round(stats.conflicts / max(stats.attempts, 1), 4),
        "mean_staleness_s": round(float(ages.mean()), 3),
        "staleness_sd_s": round(float(ages.std()), 3),
        "mean_view_age_s": round(float(np.mean(stats.view_ages_s or [0.0])), 3),
        "fresh_choice_share": round(stats.fresh_choices / max(stats.tasks, 1), 4),
        "attempts_per_request": round(stats.attempts / max(stats.requests, 1), 3),
        "gave_up": stats.gave_up,
        "tasks_placed": stats.tasks,
        "tasks_unplaced": stats.unplaced,
    }
